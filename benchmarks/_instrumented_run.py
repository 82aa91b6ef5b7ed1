"""The embedded run as the verify_stage suite measures it: a judge that costs nothing, and
the worker's sampler precompiled and timed.

Nothing here changes RLAX: :func:`instrumented` swaps, for one run, the registry the
embedded run loads (adding :class:`FixedJudge` as judge ``bench-fixed``) and the
``Sampler`` class the inference worker builds (:class:`TimedSampler`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

from pydantic import BaseModel

from rlax_core.contracts.verifier import Judge
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.hookspecs import hookimpl
from rlax_core.plugins.manager import collect_registry, make_plugin_manager
from rlax_core.plugins.registry import Registry
from rlax_core.rl.roles import components, start
from rlax_core.rl.roles import worker as worker_module
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.types.verdict import Verdict, VerdictStatus

FIXED_JUDGE = "bench-fixed"
Spans = list[tuple[float, float]]


class FixedJudgeConfig(BaseModel):
    """No judging: every completion gets the same reward at once (a benchmark's ceiling)."""


class FixedJudge(Judge):
    """Gives every completion reward 0 (what the code judge gives a random model's code)."""

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        """One fixed verdict per completion, without looking at it."""
        return [Verdict(status=VerdictStatus.WA, reward=0.0) for _ in completions]


class _FixedJudgePlugin:
    """Registers :class:`FixedJudge` as judge ``bench-fixed``."""

    @hookimpl
    def register_judges(self, register: Any) -> None:
        """Registers the fixed judge."""
        register(FIXED_JUDGE, lambda config, context: FixedJudge(), FixedJudgeConfig)


def registry_with_fixed_judge() -> Registry:
    """The installed plugins and the fixed judge."""
    return collect_registry(make_plugin_manager(extra_plugins=[_FixedJudgePlugin()]))


@dataclass(frozen=True)
class Shapes:
    """What a run's worker samples: one prompt of the task, and its batch settings."""

    prompt: list[int]
    samples: int
    max_new_tokens: int
    groups_per_batch: int

    @classmethod
    def of(cls, config: Any, config_dir: Path) -> Shapes:
        """The shapes of ``config``'s worker."""
        tokenizer = components.load_tokenizer(config, config_dir)
        _, next_prompt = components.train_prompts(config, config_dir, tokenizer)
        r = config.rollout
        return cls(next_prompt()[1], r.samples_per_prompt, r.max_new_tokens, r.groups_per_batch)


class TimedSampler(Sampler):
    """The worker's sampler, compiled for every batch it may get, its calls timed.

    A worker leases what the prompt queue holds, up to ``groups_per_batch`` groups, so a
    deep pipeline (or a stale group's refill) hands it partial batches, each size a new
    shape to compile the first time it comes: seconds of a shared CPU at a random step
    (the stalls of 10 s and more seen in the stage's runs before this). Every batch size
    is compiled here, before the run's first step, so no setting's timed steps hold a
    compilation. (The log-prob check's width hardly varies: a random model's batches
    nearly always hold a completion of the full length.) ``spans`` gets the wall-clock
    span of each call.
    """

    shapes: ClassVar[Shapes | None] = None
    spans: ClassVar[Spans] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.shapes is not None:
            self._compile_all(self.shapes)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """``Sampler.generate``, timed."""
        with self._timed():
            return super().generate(*args, **kwargs)

    def score(self, *args: Any, **kwargs: Any) -> Any:
        """``Sampler.score``, timed."""
        with self._timed():
            return super().score(*args, **kwargs)

    def _compile_all(self, shapes: Shapes) -> None:
        params = SamplingParams(max_new_tokens=shapes.max_new_tokens, stop_token_ids=(0,))
        seen = set()
        for groups in range(1, shapes.groups_per_batch + 1):
            if (shape := self.bucket_shape(groups, len(shapes.prompt))) not in seen:
                seen.add(shape)
                Sampler.generate(self, [shapes.prompt] * groups, params, seed=0,
                                 samples_per_prompt=shapes.samples)  # fmt: skip

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        started = time.time()  # metrics.jsonl's clock, so the spans clip to its steps
        try:
            yield
        finally:
            TimedSampler.spans.append((started, time.time()))


def train(config: Any, registry: Registry, config_dir: Path, run_dir: Path) -> tuple[list, Spans]:
    """One embedded run (``rlax train``'s default role) with ``registry`` and timed samplers.

    Returns:
        The run's metrics, RL steps only, and the worker's sampler spans.
    """
    spans: Spans = []
    with (
        mock.patch.object(start, "load_registry", return_value=registry),
        mock.patch.object(worker_module, "Sampler", TimedSampler),
        mock.patch.object(TimedSampler, "spans", spans),
        mock.patch.object(TimedSampler, "shapes", Shapes.of(config, config_dir)),
    ):
        start.run_all(config, config_dir, run_dir, resume=False, stop=threading.Event(),
                      progress=False)  # fmt: skip
    return [row for row in read_metrics(run_dir) if row["step"] > 0], spans


def busy_fraction(spans: Spans, begin: float, end: float) -> float:
    """The share of ``[begin, end]`` covered by ``spans`` (one worker's: they never overlap)."""
    covered = sum(max(0.0, min(b, end) - max(a, begin)) for a, b in spans)
    return covered / (end - begin)


class Setting:
    """One setting's measured steps, pooled over its runs: samples/s and the busy fraction."""

    def __init__(self) -> None:
        self.sequences = 0.0
        self.wall_s = 0.0
        self.busy_s = 0.0
        self.dropped_stale = 0.0
        self.staleness_max = 0.0

    def add(self, rows: list[dict], spans: Spans, discarded: int) -> None:
        """Adds a run's steps after the first ``discarded``."""
        kept = [r for r in rows if r["step"] > discarded]
        begin = next(r["time"] for r in rows if r["step"] == discarded)
        end = kept[-1]["time"]
        self.wall_s += end - begin
        self.busy_s += busy_fraction(spans, begin, end) * (end - begin)
        self.sequences += sum(r["batch/sequences"] for r in kept)
        self.dropped_stale += rows[-1]["staleness/dropped"]
        self.staleness_max = max(self.staleness_max, *(r["staleness/max"] for r in kept))

    @property
    def samples_per_s(self) -> float:
        """Sequences trained per second of wall time."""
        return self.sequences / self.wall_s

    @property
    def busy(self) -> float:
        """The worker's generation busy fraction."""
        return self.busy_s / self.wall_s

    def summary(self) -> dict[str, float]:
        """The figures, for a report's notes."""
        return {
            "samples_per_s": self.samples_per_s,
            "generation_busy": self.busy,
            "dropped_stale": self.dropped_stale,
            "staleness_max": self.staleness_max,
        }
