"""TensorBoard event files written through tensorboardX, read back by TensorBoard's own code."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from rlax_core.run_dir.tensorboard import FILE_VERSION, EventFile


def _accumulator(log_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return accumulator


def test_event_file_reads_back_in_tensorboard(tmp_path: Path) -> None:
    writer = EventFile(tmp_path)
    values = {step: {"reward/mean": step / 7, "grad_norm": 10.0**step} for step in range(6)}
    for step, scalars in values.items():
        writer.add_scalars(step, scalars, wall_time=1000.0 + step)
    writer.add_scalars(6, {}, wall_time=1006.0)  # nothing to log: no event
    writer.close()
    writer.close()

    # TensorBoard's record reader checks every record's CRCs.
    events = list(EventFileLoader(str(writer.path)).Load())
    assert events[0].file_version == FILE_VERSION
    assert len(events) == 1 + len(values)
    assert [len(e.summary.value) for e in events[1:]] == [2] * len(values)  # one event a step

    accumulator = _accumulator(tmp_path)
    assert sorted(accumulator.Tags()["scalars"]) == ["grad_norm", "reward/mean"]
    for tag in ("reward/mean", "grad_norm"):
        read = accumulator.Scalars(tag)
        assert [e.step for e in read] == list(values)
        assert [e.wall_time for e in read] == [1000.0 + s for s in values]
        assert [e.value for e in read] == [float(np.float32(values[s][tag])) for s in values]


def test_names_are_kept_and_large_values_become_inf(tmp_path: Path) -> None:
    writer = EventFile(tmp_path)
    # 1e39 is finite in float64 but not in float32, TensorBoard's scalar type.
    writer.add_scalars(2**40, {"eval/pass@1": 0.5, "big": 1e39, "small": -1e39}, wall_time=1.0)
    writer.close()
    accumulator = _accumulator(tmp_path)
    assert sorted(accumulator.Tags()["scalars"]) == ["big", "eval/pass@1", "small"]
    assert [(e.step, e.value) for e in accumulator.Scalars("eval/pass@1")] == [(2**40, 0.5)]
    assert accumulator.Scalars("big")[0].value == np.inf
    assert accumulator.Scalars("small")[0].value == -np.inf


def test_a_later_writer_sorts_after_the_earlier_ones(tmp_path: Path) -> None:
    # Three writers within the same second still get names in the order they were made.
    paths = []
    for _ in range(3):
        writer = EventFile(tmp_path)
        writer.close()
        paths.append(writer.path)
    assert sorted(paths) == paths and len(set(paths)) == 3
    assert all(str(os.getpid()) in p.name and "tfevents" in p.name for p in paths)


def test_session_start_drops_the_orphaned_steps(tmp_path: Path) -> None:
    first = EventFile(tmp_path)
    for step in range(6):
        first.add_scalars(step, {"x": float(step)}, wall_time=float(step))
    first.close()
    second = EventFile(tmp_path)
    second.add_session_start(3, wall_time=10.0)
    for step in (3, 4):
        second.add_scalars(step, {"x": 100.0 + step}, wall_time=10.0 + step)
    second.close()
    assert [(e.step, e.value) for e in _accumulator(tmp_path).Scalars("x")] == [
        (0, 0.0), (1, 1.0), (2, 2.0), (3, 103.0), (4, 104.0)
    ]  # fmt: skip
