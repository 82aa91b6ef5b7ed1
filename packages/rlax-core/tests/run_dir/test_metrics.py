"""metrics.jsonl and the TensorBoard files of a run: written, killed, resumed, read back."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlax_core.run_dir.metrics import (
    METRICS_FILE,
    TENSORBOARD_DIR,
    MetricsFileError,
    MetricsLog,
    read_metrics,
)


def _step_metrics(step: int) -> dict[str, float | int]:
    return {
        "policy_version": step,
        "reward/mean": step / 10,
        "staleness/max": 1,
        "loss/total": 2.0 - step / 8,
        "kl/mean": 1e-3 * step,
    }


def _tensorboard(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir / TENSORBOARD_DIR))
    accumulator.Reload()
    return accumulator


def test_each_step_is_one_line_and_one_tensorboard_event(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        for step in range(5):
            log.write(step, _step_metrics(step))
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert len(lines) == 5
    rows = read_metrics(tmp_path)
    assert rows == [json.loads(line) for line in lines]
    for step, row in enumerate(rows):
        assert list(row)[:2] == ["step", "time"] and row["step"] == step
        assert {k: v for k, v in row.items() if k not in ("step", "time")} == _step_metrics(step)
    times = [row["time"] for row in rows]
    assert times == sorted(times)

    accumulator = _tensorboard(tmp_path)
    assert sorted(accumulator.Tags()["scalars"]) == sorted(_step_metrics(0))
    events = accumulator.Scalars("reward/mean")
    assert [e.step for e in events] == list(range(5))
    assert [e.value for e in events] == [float(np.float32(s / 10)) for s in range(5)]
    assert [e.wall_time for e in events] == [row["time"] for row in rows]


def test_non_finite_values_are_null_in_json_and_absent_in_tensorboard(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        log.write(0, {"loss/total": math.nan, "grad_norm": math.inf, "reward/mean": 0.5})
        log.write(1, {"loss/total": 1.25, "grad_norm": -math.inf, "reward/mean": 0.75})
    text = (tmp_path / METRICS_FILE).read_text()
    assert "NaN" not in text and "Infinity" not in text
    rows = read_metrics(tmp_path)
    assert [(r["loss/total"], r["grad_norm"]) for r in rows] == [(None, None), (1.25, None)]
    accumulator = _tensorboard(tmp_path)
    assert [(e.step, e.value) for e in accumulator.Scalars("loss/total")] == [(1, 1.25)]
    assert "grad_norm" not in accumulator.Tags()["scalars"]


def test_numpy_and_jax_scalars_are_numbers(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        log.write(
            np.int64(3),
            {
                "step": 3,
                "a": np.float32(0.5),
                "b": np.int32(7),
                "c": np.array(2.5),
                "d": jnp.float32(1.5),
                "e": np.bool_(True),
            },
        )
    (row,) = read_metrics(tmp_path)
    assert {k: row[k] for k in "abcde"} == {"a": 0.5, "b": 7, "c": 2.5, "d": 1.5, "e": 1}
    assert isinstance(row["b"], int) and row["step"] == 3


@pytest.mark.parametrize(
    ("metrics", "error", "message"),
    [
        ({"reward/mean": "high"}, TypeError, "'reward/mean' must be a scalar number"),
        ({"loss/total": [1.0, 2.0]}, TypeError, "'loss/total' must be a scalar number"),
        ({"kl/mean": np.zeros(3)}, TypeError, "'kl/mean' must be a scalar number"),
        ({"kl/mean": None}, TypeError, "'kl/mean'"),
        ({"step": 4}, ValueError, "metrics\\['step'\\] is 4"),
        ({"time": 1.0}, ValueError, "'time' is reserved"),
    ],
)
def test_bad_metrics_are_refused_by_name(
    tmp_path: Path, metrics: dict, error: type[Exception], message: str
) -> None:
    with MetricsLog(tmp_path) as log:
        with pytest.raises(error, match=message):
            log.write(1, metrics)
        log.write(1, {"ok": 1.0})  # the refused write left nothing behind
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]


def test_steps_must_increase(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        log.write(2, {"x": 1.0})
        for step in (2, 1):
            with pytest.raises(ValueError, match=f"step {step} is not after step 2"):
                log.write(step, {"x": 1.0})
        with pytest.raises(TypeError, match="step must be an integer"):
            log.write(2.5, {"x": 1.0})  # type: ignore[arg-type]
    with MetricsLog(tmp_path) as log, pytest.raises(ValueError, match="not after step 2"):
        log.write(0, {"x": 1.0})  # a reopened log knows the file's last step


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path)
    log.write(0, {"x": 1.0})
    log.close()
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.write(1, {"x": 1.0})


_WRITE_THEN_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from rlax_core.run_dir.metrics import MetricsLog
    log = MetricsLog(sys.argv[1], resume_from_step=None if sys.argv[2] == "-" else int(sys.argv[2]))
    for step in range(int(sys.argv[3]), int(sys.argv[4])):
        log.write(step, {"policy_version": step, "reward/mean": float(sys.argv[5]) + step})
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no atexit: every line must be flushed
    """
)


def _run_and_kill(run_dir: Path, resume: int | None, first: int, end: int, reward: float) -> None:
    args = [str(run_dir), "-" if resume is None else str(resume), str(first), str(end)]
    result = subprocess.run(
        [sys.executable, "-c", _WRITE_THEN_DIE, *args, str(reward)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr


def test_a_killed_run_keeps_every_written_line(tmp_path: Path) -> None:
    _run_and_kill(tmp_path, None, 0, 7, reward=0.0)
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(7))
    assert [e.step for e in _tensorboard(tmp_path).Scalars("reward/mean")] == list(range(7))


def test_resume_drops_the_steps_after_the_checkpoint(tmp_path: Path) -> None:
    # The first run is killed at step 9; its last checkpoint was at step 5.
    _run_and_kill(tmp_path, None, 0, 10, reward=0.0)
    # The resumed run repeats steps 6.. and is itself killed after step 11.
    _run_and_kill(tmp_path, 5, 6, 12, reward=100.0)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(12))
    assert [r["reward/mean"] for r in rows] == [float(s) for s in range(6)] + [
        100.0 + s for s in range(6, 12)
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [METRICS_FILE, TENSORBOARD_DIR]
    assert len(list((tmp_path / TENSORBOARD_DIR).iterdir())) == 2
    # TensorBoard drops the first run's steps 6..9 at the restart marker of the second file.
    events = _tensorboard(tmp_path).Scalars("reward/mean")
    assert [(e.step, e.value) for e in events] == [(r["step"], r["reward/mean"]) for r in rows]


def test_resume_before_any_step_and_without_a_file(tmp_path: Path) -> None:
    with MetricsLog(tmp_path / "fresh", resume_from_step=0) as log:
        log.write(1, {"x": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path / "fresh")] == [1]
    _run_and_kill(tmp_path, None, 0, 3, reward=0.0)
    with MetricsLog(tmp_path, resume_from_step=-1) as log:
        assert log.last_step is None
        log.write(0, {"x": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [0]


def test_a_torn_last_line_is_ignored_then_repaired(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        log.write(0, {"x": 1.0})
        log.write(1, {"x": 2.0})
    path = tmp_path / METRICS_FILE
    with path.open("a") as handle:
        handle.write('{"step": 2, "time": 12.5, "x": 3.')  # the writer died mid-line
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]
    with MetricsLog(tmp_path) as log:
        assert log.last_step == 1
        log.write(2, {"x": 4.0})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(0, 1.0), (1, 2.0), (2, 4.0)]


def test_a_whole_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 2}')
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]
    with MetricsLog(tmp_path) as log:
        log.write(2, {"x": 3})
    lines = path.read_text().splitlines()
    assert lines[:2] == ['{"step": 0, "x": 1}', '{"step": 1, "x": 2}'] and len(lines) == 3
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"step": 0}\nnot json\n{"step": 2}\n', "line 2: not JSON"),
        ('{"step": 0}\n\n[1, 2]\n', "line 3: expected a JSON object, got list"),
        ('{"step": 0}\n{"policy_version": 1}\n', "line 2: no integer 'step'"),
        ('{"step": "0"}\n', "line 1: no integer 'step'"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / METRICS_FILE).write_text(content)
    with pytest.raises(MetricsFileError, match=message):
        read_metrics(tmp_path)
    with pytest.raises(MetricsFileError, match=message):
        MetricsLog(tmp_path)


def test_reading_a_directory_without_metrics(tmp_path: Path) -> None:
    with pytest.raises(MetricsFileError, match=f"no {METRICS_FILE} in"):
        read_metrics(tmp_path)
    (tmp_path / METRICS_FILE).write_text("")
    assert read_metrics(tmp_path) == []
