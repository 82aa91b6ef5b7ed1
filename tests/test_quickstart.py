"""The main job: the README's first command runs the quickstart, which learns, visibly, and
the gain is RL's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rlax_core.run_dir.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_quickstart_raises_held_out_pass_at_1_by_25_points(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(REPO / "scripts" / "quickstart"), "--no-progress"],
        env={**os.environ, "RLAX_RUN_DIR": str(tmp_path / "run")},
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "held-out pass@1 by RL step: 0: " in result.stdout
    assert sorted(p.name for p in (tmp_path / "run" / "plots").glob("*.png"))  # rlax plot ran
    evals = [
        (r["step"], r["eval/pass@1"]) for r in read_metrics(tmp_path / "run") if "eval/pass@1" in r
    ]
    assert evals[0][0] == 0  # evaluated at RL step 0, after the warm start
    assert evals[-1][0] == 100
    gain = evals[-1][1] - evals[0][1]
    assert gain >= 0.25, f"held-out pass@1 went {evals[0][1]:.3f} → {evals[-1][1]:.3f}"
