"""Measuring a subject beside its baseline, interleaved, and keeping every sample."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlax_core.errors import ConfigError


@dataclass
class Comparison:
    """One figure of the subject beside the same figure of a baseline.

    Attributes:
        name: what is measured, e.g. "publish 256 MB".
        unit: unit of ``subject`` and ``baseline``, e.g. "s" or "GB/s".
        higher_is_better: True for throughputs, False for times.
        subject_label / baseline_label: what was measured on each side.
        subject / baseline: the medians.
        subject_samples / baseline_samples: every sample.
    """

    name: str
    unit: str
    higher_is_better: bool
    subject_label: str
    baseline_label: str
    subject: float
    baseline: float
    subject_samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """How many times better the subject is than the baseline (>1: subject better)."""
        if self.higher_is_better:
            return self.subject / self.baseline if self.baseline else float("inf")
        return self.baseline / self.subject if self.subject else float("inf")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with the ratio included."""
        return {**asdict(self), "speedup": self.speedup}


class Bench:
    """What a suite's ``run(bench)`` receives: measuring tools and the results so far.

    Attributes:
        quick: a short run (CI checks that suites still work); suites use small sizes.
        results: the comparisons recorded so far.
        notes: free-form facts the suite wants in the report (sizes, versions).
    """

    def __init__(self, *, quick: bool = False) -> None:
        self.quick = quick
        self.results: list[Comparison] = []
        self.notes: dict[str, Any] = {}

    def time(
        self,
        name: str,
        subject: Callable[[], Any],
        baseline: Callable[[], Any],
        *,
        subject_label: str = "rlax",
        baseline_label: str,
        repeats: int = 5,
        warmup: int = 1,
        work: float | None = None,
        work_unit: str = "items",
    ) -> Comparison:
        """Times ``subject`` and ``baseline`` alternately, ``repeats`` times each.

        Alternating (ABAB...) spreads the machine's noise over both sides evenly.

        Args:
            work: amount of work one call does (bytes, items); if given, the figures are
                throughputs in ``work_unit``/s, else seconds per call.
        """
        taken = taking_turns({"subject": subject, "baseline": baseline},
                             1 if self.quick else repeats, warmup=warmup)  # fmt: skip
        s_times, b_times = taken["subject"], taken["baseline"]
        if work is None:
            comparison = Comparison(
                name, "s", False, subject_label, baseline_label,
                statistics.median(s_times), statistics.median(b_times), s_times, b_times,
            )  # fmt: skip
        else:
            s_rates = [work / t for t in s_times]
            b_rates = [work / t for t in b_times]
            comparison = Comparison(
                name, f"{work_unit}/s", True, subject_label, baseline_label,
                statistics.median(s_rates), statistics.median(b_rates), s_rates, b_rates,
            )  # fmt: skip
        self.results.append(comparison)
        return comparison

    def record(
        self,
        name: str,
        *,
        subject: float,
        baseline: float,
        unit: str,
        higher_is_better: bool,
        subject_label: str = "rlax",
        baseline_label: str,
    ) -> Comparison:
        """Records a pair of figures the suite measured itself (same run, both sides)."""
        comparison = Comparison(
            name, unit, higher_is_better, subject_label, baseline_label, subject, baseline,
            [subject], [baseline],
        )  # fmt: skip
        self.results.append(comparison)
        return comparison


def chosen_parts(variable: str, parts: Sequence[str]) -> set[str]:
    """The parts of a suite that the environment variable ``variable`` names, comma
    separated (unset or empty: all of ``parts``), for a run of some of a long suite."""
    chosen = os.environ.get(variable)
    if not chosen:
        return set(parts)
    named = {part.strip() for part in chosen.split(",") if part.strip()}
    if unknown := named - set(parts):
        raise ConfigError(
            f"{variable} names {', '.join(sorted(unknown))}; the parts are {', '.join(parts)}"
        )
    return named


def chosen_counts(
    variable: str, default: Sequence[int], *, multiple_of: int = 1
) -> tuple[int, ...]:
    """The sizes that the environment variable ``variable`` names, comma separated
    (unset or empty: ``default``), each a positive multiple of ``multiple_of``."""
    chosen = os.environ.get(variable)
    if not chosen:
        return tuple(default)
    words = [word.strip() for word in chosen.split(",") if word.strip()]
    counts = tuple(int(word) for word in words if word.isdigit())
    if not words or len(counts) != len(words) or any(c == 0 or c % multiple_of for c in counts):
        kind = f"positive multiples of {multiple_of}" if multiple_of > 1 else "positive numbers"
        raise ConfigError(f"{variable}={chosen!r}: give {kind}, comma separated (e.g. "
                          f"{','.join(map(str, default))})")  # fmt: skip
    return counts


def taking_turns(
    runs: dict[str, Callable[[], Any]], rounds: int, *, warmup: int = 0
) -> dict[str, list[float]]:
    """Each run's seconds over ``rounds`` rounds (after ``warmup`` untimed ones), the
    runs taking turns within a round, so that the machine's noise falls on every side
    alike."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            seconds[name].append(_timed(run))
    return seconds


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
