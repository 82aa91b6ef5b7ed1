"""The main job: the quickstart learns, visibly, and the gain is RL's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlax_core.run_dir.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_quickstart_raises_held_out_pass_at_1_by_25_points(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "train", str(REPO / "examples" / "quickstart.yaml"),
         "--run-dir", str(tmp_path / "run"), "--no-progress"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    evals = [
        (r["step"], r["eval/pass@1"]) for r in read_metrics(tmp_path / "run") if "eval/pass@1" in r
    ]
    assert evals[0][0] == 0  # evaluated at RL step 0, after the warm start
    assert evals[-1][0] == 100
    gain = evals[-1][1] - evals[0][1]
    assert gain >= 0.25, f"held-out pass@1 went {evals[0][1]:.3f} → {evals[-1][1]:.3f}"
