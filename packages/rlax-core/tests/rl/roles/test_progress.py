"""The progress display: what it says during the warm start, training and evaluation."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rlax_core.rl.roles.progress import StepProgress


def test_the_bar_is_labelled_with_what_the_run_is_doing() -> None:
    screen = io.StringIO()
    progress = StepProgress(3, console=Console(file=screen, force_terminal=True, width=120))

    def now() -> str:  # what the terminal shows now: the last frame drawn
        frames = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()).split("\r")
        return [frame.strip() for frame in frames if frame.strip()][-1]

    with progress.warm_start(5) as on_step:
        for step in range(1, 6):
            on_step(step, 2.0 / step)
    assert now().startswith("warm start 5/5") and "loss 0.400" in now()
    with progress:
        with progress.evaluating("4 prompts × 2 samples"):
            assert now().startswith("evaluating: 4 prompts × 2 samples")
        progress.update(1, {"reward/mean": 0.25})
    assert now().startswith("step 1/3") and "reward 0.250" in now()


def test_without_a_terminal_each_phase_is_a_line(capsys: pytest.CaptureFixture) -> None:
    progress = StepProgress(2)  # stderr is no terminal under pytest
    with progress.warm_start(20) as on_step:
        for step in range(1, 21):
            on_step(step, 1.0)
    with progress:
        with progress.evaluating("8 prompts × 2 samples"):
            pass
        progress.update(1, {"reward/mean": 0.5, "eval/pass@1": 0.25})
    lines = [line.split("  (")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        *(f"warm start {step}/20  loss 1.000" for step in range(2, 21, 2)),
        "evaluating: 8 prompts × 2 samples",
        "step 1/2  reward 0.500  pass@1 0.250",
    ]
