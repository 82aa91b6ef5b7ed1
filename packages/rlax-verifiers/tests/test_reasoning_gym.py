"""reasoning-gym as a prompt source and a judge: examples made from a task's generator
and seed, scored by the task's own scorer, and a few RL steps trained on them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlax_core.config.sections import DatasetConfig
from rlax_core.data import PromptDataset
from rlax_core.errors import ConfigError
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.run_configs import small_run_config
from rlax_verifiers.reasoning_gym import (
    ReasoningGymJudge,
    ReasoningGymJudgeConfig,
    ReasoningGymSource,
    ReasoningGymSourceConfig,
)

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart"
SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
ARITHMETIC = {"type": "reasoning_gym", "task": "basic_arithmetic", "size": 40, "seed": 3,
              "config": SMALL}  # fmt: skip


def _examples(**settings):
    config = ReasoningGymSourceConfig(**{k: v for k, v in {**ARITHMETIC, **settings}.items()
                                         if k != "type"})  # fmt: skip
    return ReasoningGymSource(config).examples("arith")


def test_a_task_becomes_a_dataset_fixed_by_its_seed() -> None:
    first, again, other = _examples(), _examples(), _examples(seed=4)
    assert [e.prompt for e in first] == [e.prompt for e in again] != [e.prompt for e in other]
    assert [e.example_id for e in first] == [f"arith/{i}" for i in range(40)]
    example = first[0]
    assert example.prompt.endswith("<answer></answer> tags.")
    assert (
        example.problem["kind"] == "reasoning_gym" and example.problem["task"] == "basic_arithmetic"
    )
    json.dumps(example.problem)  # it travels to the judge as JSON
    config = DatasetConfig(source=ARITHMETIC, limit=5, prompt_template="Solve: {prompt}")
    dataset = PromptDataset.load(config, REPO)
    assert dataset.name == "reasoning_gym" and len(dataset) == 5
    assert dataset[0].prompt == f"Solve: {example.prompt}"


def test_an_unknown_task_or_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot make task 'no_such_task'"):
        _examples(task="no_such_task")
    with pytest.raises(ConfigError, match="prompt_source 'reasoning_gym'"):
        PromptDataset.load(DatasetConfig(source={**ARITHMETIC, "size": 0}), REPO)


def test_the_task_scorer_decides_the_reward() -> None:
    judge = ReasoningGymJudge(ReasoningGymJudgeConfig())
    example = _examples()[0]
    answer = example.problem["entry"]["answer"]
    right, wrong, silent, foreign = judge.judge(
        [example.problem] * 3 + [{"kind": "math", "answer": "1"}],
        [f"Thinking... <answer>{answer}</answer>", "<answer>not a number</answer>",
         f"The answer is {answer}.", "<answer>1</answer>"],
    )  # fmt: skip
    assert (right.status, right.reward) == ("AC", 1.0)
    assert (wrong.status, wrong.reward) == ("WA", 0.0)
    assert silent.reward == 0.0 and "no <answer>" in silent.message
    assert foreign.status == "IE" and foreign.reward is None


@pytest.mark.slow
def test_rl_trains_a_few_steps_on_a_reasoning_gym_task(tmp_path: Path) -> None:
    config = small_run_config(QUICKSTART, name="rg", seed=2, evaluate=False)
    config["data"] = {"train": [{"source": ARITHMETIC}]}
    config["verifier"] = {"judge": {"type": "reasoning_gym"}}
    config["trainer"] = {"total_steps": 2, "learning_rate": 1e-3}
    config["rollout"]["max_new_tokens"] = 8
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run([sys.executable, "-m", "rlax_core.cli", "config", "check", str(path)],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert "judge=reasoning_gym" in check.stdout and "prompt_source=reasoning_gym" in check.stdout
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "train", str(path), "--run-dir", str(run_dir),
         "--no-progress"], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    steps = read_metrics(run_dir)
    trained = [row for row in steps if "reward/mean" in row]
    assert [row["step"] for row in trained][-1] == 2
    assert all(row["verdict/no_reward"] == 0 for row in trained)  # every completion judged
