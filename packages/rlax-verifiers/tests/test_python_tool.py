"""The python tool: model code runs in the configured sandbox, with its limits, and the
model reads back what happened, through the tool environment as a rollout would."""

from __future__ import annotations

import json

import pytest

from rlax_core.environments import ToolEnvironment
from rlax_core.plugins import BuildContext, load_registry


def _environment(sandbox: dict | None = None) -> ToolEnvironment:
    registry = load_registry()
    config = None
    if sandbox is not None:
        config = registry.get("sandbox", sandbox["type"]).config_cls.model_validate(sandbox)
    context = BuildContext(registry, sandbox=config)
    tool = context.build_tool({"type": "python", "time_limit_s": 2.0, "output_limit_bytes": 200})
    return ToolEnvironment([tool])


def _run(environment: ToolEnvironment, code: str) -> str:
    call = json.dumps({"name": "python", "arguments": {"code": code}})
    (message,) = environment.start({}).step(f"<tool_call>\n{call}\n</tool_call>").messages
    return message.content


@pytest.fixture(scope="module")
def local() -> ToolEnvironment:
    environment = _environment()
    yield environment
    environment.close()


def test_the_sandbox_is_built_on_the_first_call() -> None:
    environment = _environment()
    (tool,) = environment.tools
    assert tool._sandbox is None  # listing the tool (a prompt) starts nothing
    assert _run(environment, "print(6 * 7)").strip() == "42"
    assert tool._sandbox is not None
    environment.close()
    assert tool._sandbox is None


def test_the_model_reads_what_its_code_printed_or_why_it_failed(local: ToolEnvironment) -> None:
    assert _run(local, "print(2 ** 100)").strip() == str(2**100)
    assert _run(local, "x = 1") == "(the program printed nothing)"
    failed = _run(local, "print('before')\nraise ValueError('bad input')")
    assert failed.startswith("before\nError (exit code 1):") and "ValueError: bad input" in failed
    assert "ran past 2 s and was stopped" in _run(local, "while True: pass")
    assert "[stdout truncated]" in _run(local, "print('x' * 10_000)")


def test_nothing_carries_over_between_calls(local: ToolEnvironment) -> None:
    _run(local, "open('/tmp/kept', 'w').write('x')\nimport builtins\nbuiltins.kept = 1")
    assert "NameError" in _run(local, "print(kept)")


def test_a_call_without_code_is_answered_with_the_error(local: ToolEnvironment) -> None:
    (message,) = local.start({}).step('<tool_call>\n{"name": "python"}\n</tool_call>').messages
    assert message.content.startswith("Error: wrong arguments for python: code: Field required")


@pytest.mark.docker
@pytest.mark.slow
def test_calls_run_in_the_docker_sandbox_when_it_is_configured() -> None:
    environment = _environment({"type": "docker", "workers": 1})
    try:
        assert _run(environment, "import os; print(os.getuid() != 0, 6 * 7)").strip() == "True 42"
    finally:
        environment.close()
