"""A short run of the tool quickstart (examples/tool_quickstart.yaml), as written but for
its length: the warm start's demonstrations, played through the tools environment, teach
the model to call the calculator; rollouts are two-turn conversations, token-exact; the
evaluation with the tools unanswered runs beside the one with them. (The whole run's
curve is in the README; it takes minutes, not a test's seconds.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from rlax_core.run_dir.metrics import read_metrics

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_a_short_tool_quickstart_run_calls_the_tool(tmp_path: Path) -> None:
    config = yaml.safe_load((EXAMPLES / "tool_quickstart.yaml").read_text())
    config["model"]["tokenizer"] = str(EXAMPLES / config["model"]["tokenizer"])
    for dataset in [*config["data"]["train"], config["data"]["eval"]]:
        dataset["path"] = str(EXAMPLES / dataset["path"])
    config["data"]["eval"]["limit"] = 24
    config["trainer"].update(total_steps=3, warmup_steps=1)
    config["eval"]["every_steps"] = 3
    config["checkpoint"]["every_steps"] = 100
    path = tmp_path / "tool_quickstart.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "train", str(path), "--run-dir", str(run_dir),
         "--no-progress"], capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warm = json.loads((run_dir / "status" / "warm_start.json").read_text())
    assert warm["steps"] == 50 and warm["final_loss"] < 0.5
    rows = read_metrics(run_dir)
    evals = [row for row in rows if "eval/pass@1" in row]
    assert [row["step"] for row in evals] == [0, 3]
    for row in evals:
        assert row["eval/turns_mean"] > 1.2  # most samples call the tool, then answer
        assert row["eval_without_tools/pass@1"] <= row["eval/pass@1"] + 0.05
    trained = [row for row in rows if "reward/mean" in row]
    assert len(trained) == 3
    for row in trained:
        assert row["completion/turns_mean"] > 1.2
        assert row["verdict/no_reward"] == 0  # every rollout judged, none lost
    assert trained[0]["logprob_gap/max"] < 1e-5
