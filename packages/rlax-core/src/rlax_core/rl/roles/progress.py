"""The progress display of a training run: a rich bar on a terminal, a line per step elsewhere.

One bar serves the whole run, labelled with what the run is doing: ``warm start 12/35``
(with its loss) before RL, ``step 20/100`` while training, ``evaluating: 200 prompts ×
8 samples`` while an evaluation holds the step up (one takes as long as several steps,
and a bar that stands still without saying why looks hung). Without a terminal (a log
file, a pod) the same labels come as lines: one per step, about ten for the warm start,
one when an evaluation starts.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

_FIELDS = (
    ("reward/mean", "reward", "{:.3f}"),
    ("eval/pass@1", "pass@1", "{:.3f}"),
    ("staleness/max", "stale", "{:.0f}"),
    ("throughput/train_tokens_per_s", "tok/s", "{:,.0f}"),
)
_WARM_START_LINES = 10  # lines a warm start prints without a terminal


class StepProgress:
    """Shows the warm start, then step, reward, pass@1, staleness, tokens/s and the ETA.

    Args:
        total_steps: the run's step budget.
        enabled: False shows nothing (tests, worker processes).
        console: where the bar is drawn (default: stderr); lines when it is no terminal.
    """

    def __init__(
        self, total_steps: int, *, enabled: bool = True, console: Console | None = None
    ) -> None:
        self._total = total_steps
        self._enabled = enabled
        terminal = console.is_terminal if console is not None else sys.stderr.isatty()
        self._live = enabled and terminal
        self._last: dict[str, float] = {}
        self._step = 0
        self._started = time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[summary]}"),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
            disable=not self._live,
        )
        self._task = self._progress.add_task(self._step_label(), total=total_steps, summary="")

    def __enter__(self) -> StepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, step: int, metrics: Mapping[str, float]) -> None:
        """Records a finished step."""
        self._step = step
        self._last.update(
            {k: v for k, v in metrics.items() if k in dict.fromkeys(f[0] for f in _FIELDS)}
        )
        summary = "  ".join(
            f"{label} {fmt.format(self._last[key])}"
            for key, label, fmt in _FIELDS
            if key in self._last
        )
        self._progress.update(
            self._task, description=self._step_label(), completed=step, summary=summary
        )
        if self._enabled and not self._live and step:
            elapsed = time.monotonic() - self._started
            print(
                f"step {step}/{self._total}  {summary}  ({elapsed:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    @contextlib.contextmanager
    def warm_start(self, steps: int) -> Iterator[Callable[[int, float], None]]:
        """Shows the warm start while inside; yields the ``on_step(step, loss)`` to call.

        The bar is shown only for the warm start's duration (it runs while the trainer is
        still being built): an error in it leaves no live display behind.
        """
        started = time.monotonic()
        every = max(1, steps // _WARM_START_LINES)
        self._progress.update(self._task, description=f"warm start 0/{steps}", total=steps,
                              completed=0, summary="")  # fmt: skip

        def on_step(step: int, loss: float) -> None:
            self._progress.update(self._task, description=f"warm start {step}/{steps}",
                                  completed=step, summary=f"loss {loss:.3f}")  # fmt: skip
            if self._enabled and not self._live and (step % every == 0 or step == steps):
                print(
                    f"warm start {step}/{steps}  loss {loss:.3f}  "
                    f"({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )

        self._progress.start()
        try:
            yield on_step
        finally:
            self._progress.stop()
            self._progress.update(self._task, description=self._step_label(),
                                  total=self._total, completed=self._step, summary="")  # fmt: skip

    @contextlib.contextmanager
    def evaluating(self, what: str) -> Iterator[None]:
        """Labels the bar ``evaluating: <what>`` while inside (``what``: the prompts and
        samples, e.g. ``200 prompts × 8 samples``)."""
        label = f"evaluating: {what}"
        self._progress.update(self._task, description=label)
        self._progress.refresh()
        if self._enabled and not self._live:
            print(label, file=sys.stderr, flush=True)
        try:
            yield
        finally:
            self._progress.update(self._task, description=self._step_label())

    def _step_label(self) -> str:
        return f"step {self._step}/{self._total}"
