"""prime's ``verifiers`` environments in RLAX: one built in the test from the library's
public API (a ``MultiTurnEnv`` with a system prompt, a tool offered, a rubric), its
dataset as a prompt source, its rollouts through the worker's OpenAI endpoint, and RL
training a few steps on its rubric's reward."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlax_core.errors import ConfigError
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.run_configs import small_run_config
from rlax_verifiers.prime import (
    VerifiersEnvironment,
    VerifiersEnvironmentConfig,
    VerifiersSource,
    VerifiersSourceConfig,
)

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart"
MODULE = "rlax_test_persistent_env"
SYSTEM = "Answer with a number. Use add if you like."

# A verifiers environment as its authors write one: load_environment() builds it from the
# library's public API. It asks again twice (three model turns) and rewards an answer of
# an even number of characters, so that rewards differ within a group.
ENVIRONMENT_MODULE = f'''
import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


class Persistent(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage(content="Are you sure? Try again.")]


def even_answer(completion, **kwargs) -> float:
    last = [m for m in completion if m.role == "assistant"][-1]
    return float(len(last.content or "") % 2 == 0)


def load_environment(count: int = 6):
    rows = [{{"question": f"What is {{i}} + {{i + 1}}?", "answer": str(2 * i + 1)}}
            for i in range(count)]
    return Persistent(
        dataset=Dataset.from_list(rows), system_prompt={SYSTEM!r},
        tool_defs=[vf.utils.tool_utils.convert_func_to_tool_def(add)],
        rubric=vf.Rubric(funcs=[even_answer]), max_turns=3,
    )
'''


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("environments")
    (path / f"{MODULE}.py").write_text(ENVIRONMENT_MODULE)
    sys.path.insert(0, str(path))
    yield path
    sys.path.remove(str(path))


def test_the_environments_dataset_is_a_prompt_source(module_dir: Path) -> None:
    """Prompts as the environment formats them (its system prompt), the row as the
    problem; its tools are what the model is shown."""
    source = VerifiersSource(VerifiersSourceConfig(environment=MODULE, args={"count": 4}))
    examples = source.examples("persistent")
    assert [e.example_id for e in examples] == [f"persistent/{i}" for i in range(4)]
    first = examples[1]
    assert first.messages == (
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 1 + 2?"},
    )
    assert first.problem["kind"] == "verifiers" and first.problem["input"]["answer"] == "3"
    environment = VerifiersEnvironment(VerifiersEnvironmentConfig(environment=MODULE,
                                                                  args={"count": 4}))  # fmt: skip
    (tool,) = environment.tools
    schema = tool.schema()["function"]
    assert schema["name"] == "add" and set(schema["parameters"]["properties"]) == {"a", "b"}
    sized = VerifiersSource(VerifiersSourceConfig(environment=MODULE, size=2))
    assert len(sized.examples("p")) == 2


def test_an_environment_that_cannot_be_loaded_is_a_config_error(module_dir: Path) -> None:
    with pytest.raises(ConfigError, match="'no_such_environment' cannot be loaded"):
        VerifiersEnvironment(VerifiersEnvironmentConfig(environment="no_such_environment"))
    with pytest.raises(ConfigError, match="unexpected keyword"):
        VerifiersSource(VerifiersSourceConfig(environment=MODULE, args={"colour": 1})).examples("p")


def test_rl_trains_a_few_steps_on_a_verifiers_environment(module_dir: Path, tmp_path: Path) -> None:
    """`rlax train` on the environment: three model turns a rollout (its own limit), the
    rollouts rewarded by its rubric. (A turn the random model ends at once is, to verifiers,
    an empty response that fails its rollout: that one is SE, never trained on.)"""
    spec = {"environment": MODULE, "args": {"count": 6}}
    config = small_run_config(QUICKSTART, name="vf", seed=2, evaluate=False)
    config["data"] = {"train": [{"source": {"type": "verifiers", **spec}}]}
    config["environment"] = {"type": "verifiers", **spec}
    config["trainer"] = {"total_steps": 2, "learning_rate": 1e-3}
    config["rollout"].update(
        max_new_tokens=400, chat_template=True, prompts_per_step=2,
        engine={"kind": "paged", "slots": 8, "max_prompt_tokens": 1024},
        turns={"max_turns": 5, "turn_tokens": 8, "step_timeout_s": 60},
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(module_dir)}
    check = subprocess.run([sys.executable, "-m", "rlax_core.cli", "config", "check", str(path)],
                           capture_output=True, text=True, env=env)  # fmt: skip
    assert check.returncode == 0, check.stderr[-3000:]
    assert "environment=verifiers" in check.stdout and "prompt_source=verifiers" in check.stdout
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "train", str(path), "--run-dir", str(run_dir),
         "--no-progress"], capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    trained = [row for row in read_metrics(run_dir) if "reward/mean" in row]
    assert [row["step"] for row in trained][-1] == 2
    assert sum(row["verdict/no_reward"] for row in trained) <= 2  # of 16 rollouts
    for row in trained:
        assert row["completion/turns_mean"] >= 2.5  # the environment's max_turns: 3
        assert 0.0 <= row["reward/mean"] <= 1.0
    assert trained[0]["logprob_gap/max"] < 1e-5  # sampler and trainer, same weights
