"""Each package installs on its own: wheels built, a fresh venv, only what was installed.

This is what a user does: ``pip install rlax-core rlax-verifiers`` (here, the wheels that
``uv build`` makes), then ``rlax plugins``. A third-party plugin installed beside them is
discovered and usable from a run config.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PLUGIN = REPO / "tests" / "example_plugin"
EXAMPLE_ENVIRONMENT = REPO / "tests" / "example_environment"
# The model section of the configs the plugin tests check: `rlax config check` loads the tokenizer.
MODEL = f"model:\n  preset: tiny\n  tokenizer: {REPO / 'examples' / 'quickstart' / 'tokenizer'}\n"

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    if check and result.returncode != 0:
        command = " ".join(map(str, args))
        raise AssertionError(
            f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` sets $UV
    if uv is None:
        pytest.fail("uv is not on PATH; run the tests through ./scripts/test")
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = _uv()
    dist = tmp_path_factory.mktemp("dist")
    _run(uv, "build", "--all-packages", "--wheel", "--out-dir", dist)
    _run(uv, "build", "--wheel", "--out-dir", dist, EXAMPLE_PLUGIN)
    _run(uv, "build", "--wheel", "--out-dir", dist, EXAMPLE_ENVIRONMENT)
    # Pin third-party dependencies to the lock, so the fresh venv installs from uv's cache.
    _run(
        uv, "export", "--frozen", "--no-hashes", "--all-packages", "--no-emit-workspace",
        "--no-dev", "--output-file", dist / "constraints.txt",
    )  # fmt: skip
    return dist


@pytest.fixture(scope="module")
def venv(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fresh") / "venv"
    _run(_uv(), "venv", "--python", sys.executable, path)
    wanted = [next(wheels.glob(f"{name}-*.whl")) for name in ("rlax_core", "rlax_verifiers")]
    _install(path, wheels, *wanted)
    return path


def _install(venv: Path, wheels: Path, *packages: Path) -> None:
    _run(
        _uv(), "pip", "install", "--python", venv / "bin" / "python",
        "--constraint", wheels / "constraints.txt", *packages,
    )  # fmt: skip


def _plugins(venv: Path) -> dict:
    return json.loads(_run(venv / "bin" / "rlax", "plugins", "--json").stdout)


def test_every_member_builds_a_wheel(wheels: Path) -> None:
    built = sorted(p.name.split("-")[0] for p in wheels.glob("*.whl"))
    assert built == [
        "rlax_core",
        "rlax_example_environment",
        "rlax_example_judge",
        "rlax_launchers",
        "rlax_transport_grpc",
        "rlax_transport_nats",
        "rlax_verifiers",
    ]


def test_core_and_verifiers_list_exactly_their_plugins(venv: Path) -> None:
    listing = _plugins(venv)
    assert set(listing["packages"]) == {"rlax-core", "rlax-verifiers"}
    assert {(p["kind"], p["name"], p["package"]) for p in listing["plugins"]} == {
        ("transport", "inproc", "rlax-core"),
        ("environment", "single_turn", "rlax-core"),
        ("environment", "tools", "rlax-core"),
        ("tool", "calculator", "rlax-core"),
        ("tool", "python", "rlax-verifiers"),
        ("judge", "reasoning_gym", "rlax-verifiers"),
        ("prompt_source", "reasoning_gym", "rlax-verifiers"),
        ("prompt_source", "verifiers", "rlax-verifiers"),
        ("environment", "verifiers", "rlax-verifiers"),
        ("judge", "math", "rlax-verifiers"),
        ("judge", "code", "rlax-verifiers"),
        ("sandbox", "local", "rlax-verifiers"),
        ("sandbox", "docker", "rlax-verifiers"),
        ("sandbox", "lambda", "rlax-verifiers"),
    }
    table = _run(venv / "bin" / "rlax", "plugins").stdout
    assert "rlax-verifiers" in table and "nats" not in table


def test_a_run_config_cannot_use_an_uninstalled_plugin(venv: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("transport:\n  type: nats\n")
    result = _run(venv / "bin" / "rlax", "config", "check", config, check=False)
    assert result.returncode == 2
    assert "type 'nats' is not an installed transport; installed: 'inproc'" in result.stderr


def test_a_third_party_plugin_is_discovered_and_usable(
    venv: Path, wheels: Path, tmp_path: Path
) -> None:
    _install(venv, wheels, next(wheels.glob("rlax_example_judge-*.whl")))
    listing = _plugins(venv)
    assert {"kind": "judge", "name": "keyword", "package": "rlax-example-judge"}.items() <= next(
        p for p in listing["plugins"] if p["name"] == "keyword"
    ).items()
    assert listing["packages"]["rlax-example-judge"] == "1.2.3"

    config = tmp_path / "run.yaml"
    config.write_text(
        "verifier:\n  judge:\n    type: keyword\n    keyword: Paris\n    reward: 2.0\n" + MODEL
    )
    check = _run(venv / "bin" / "rlax", "config", "check", config)
    assert "judge=keyword" in check.stdout

    use = f"""
import json
from rlax_core.config import load_run_config
from rlax_core.plugins import BuildContext, load_registry
registry = load_registry()
config = load_run_config({str(config)!r}, registry)
judge = registry.build("judge", config.verifier.judge, BuildContext(registry, run_config=config))
verdicts = judge.judge([{{}}, {{}}], ["It is paris.", "It is Rome."])
print(json.dumps([[v.status, v.reward] for v in verdicts]))
"""
    out = _run(venv / "bin" / "python", "-c", use).stdout
    assert json.loads(out) == [["AC", 2.0], ["WA", 0.0]]

    bad = tmp_path / "bad.yaml"
    bad.write_text("verifier:\n  judge:\n    type: keyword\n    keywrd: Paris\n")
    result = _run(venv / "bin" / "rlax", "config", "check", bad, check=False)
    assert result.returncode == 2
    assert "verifier.judge.keywrd: unknown key 'keywrd' (did you mean 'keyword'?)" in result.stderr


def test_a_third_party_environment_plugin_trains_from_a_run_config(
    venv: Path, wheels: Path, tmp_path: Path
) -> None:
    """An environment and a tool from an outside package: listed, checked in a run
    config, and played (its episodes answer turns; its tool sits beside the built-in
    calculator in the tools environment)."""
    _install(venv, wheels, next(wheels.glob("rlax_example_environment-*.whl")))
    listing = _plugins(venv)
    ours = {(p["kind"], p["name"]) for p in listing["plugins"]
            if p["package"] == "rlax-example-environment"}  # fmt: skip
    assert ours == {("environment", "guess_number"), ("tool", "reverse")}

    config = tmp_path / "run.yaml"
    config.write_text("environment:\n  type: guess_number\n  reward: 3.0\n" + MODEL)
    assert (
        "environment=guess_number" in _run(venv / "bin" / "rlax", "config", "check", config).stdout
    )
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        "environment:\n  type: tools\n  tools:\n    - type: reverse\n    - type: calculator\n"
        + MODEL
    )
    _run(venv / "bin" / "rlax", "config", "check", tools)

    use = f"""
import json
from rlax_core.config import load_run_config
from rlax_core.plugins import BuildContext, load_registry
registry = load_registry()
def build(path):
    config = load_run_config(path, registry)
    context = BuildContext(registry, run_config=config)
    return registry.build("environment", config.environment, context)
game = build({str(config)!r}).start({{"number": 7}})
steps = [game.step(turn) for turn in ["Is it 3?", "Then 9.", "7!"]]
tools = build({str(tools)!r})
call = '<tool_call>{{"name": "reverse", "arguments": {{"text": "abc"}}}}</tool_call>'
print(json.dumps({{
    "game": [[m.content for m in s.messages] + [s.done, s.reward] for s in steps],
    "tools": [t.name for t in tools.tools],
    "reversed": tools.start({{}}).step(call).messages[0].content,
}}))
"""
    out = json.loads(_run(venv / "bin" / "python", "-c", use).stdout)
    assert out["game"] == [["No: higher.", False, None], ["No: lower.", False, None], [True, 3.0]]
    assert out["tools"] == ["reverse", "calculator"] and out["reversed"] == "cba"
