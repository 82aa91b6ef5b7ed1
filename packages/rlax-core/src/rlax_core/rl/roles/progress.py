"""The progress display of a training run: a rich bar on a terminal, a line per step elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

_FIELDS = (
    ("reward/mean", "reward", "{:.3f}"),
    ("eval/pass@1", "pass@1", "{:.3f}"),
    ("staleness/max", "stale", "{:.0f}"),
    ("throughput/train_tokens_per_s", "tok/s", "{:,.0f}"),
)


class StepProgress:
    """Shows step, reward, pass@1, staleness, tokens/s and the ETA.

    Args:
        total_steps: the run's step budget.
        enabled: False shows nothing (tests, worker processes).
    """

    def __init__(self, total_steps: int, *, enabled: bool = True) -> None:
        self._total = total_steps
        self._enabled = enabled
        self._live = enabled and sys.stderr.isatty()
        self._last: dict[str, float] = {}
        self._started = time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("{task.fields[summary]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not self._live,
        )
        self._task = self._progress.add_task("train", total=total_steps, summary="")

    def __enter__(self) -> StepProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        """Records a finished step."""
        self._last.update(
            {k: v for k, v in metrics.items() if k in dict.fromkeys(f[0] for f in _FIELDS)}
        )
        summary = "  ".join(
            f"{label} {fmt.format(self._last[key])}"
            for key, label, fmt in _FIELDS
            if key in self._last
        )
        self._progress.update(self._task, completed=step, summary=summary)
        if self._enabled and not self._live and step:
            elapsed = time.monotonic() - self._started
            print(
                f"step {step}/{self._total}  {summary}  ({elapsed:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
