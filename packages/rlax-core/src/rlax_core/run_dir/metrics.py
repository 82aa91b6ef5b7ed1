"""The run's metrics: ``RUN_DIR/metrics.jsonl``, TensorBoard event files, optionally W&B.

Every step the loop calls :meth:`MetricsLog.write` once with that step's scalars. The
step becomes one line of ``metrics.jsonl``, ``{"step": S, "time": unix_seconds, ...}``,
one event in ``RUN_DIR/tensorboard/`` and, when the run config sets ``metrics.wandb``,
one step of a Weights & Biases run. JSON has no NaN, so a non-finite value is written as
``null`` (and left out of TensorBoard and W&B). Each line and TensorBoard event is
flushed as it is written: a crash loses at most the line being written, which
:func:`read_metrics` then ignores. A resumed run drops the lines written after its
checkpoint, so the file never holds a step twice. ``metrics.jsonl`` is the source of
truth; the others are views of it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rlax_core.errors import RlaxError
from rlax_core.run_dir.wandb_run import WandbRun, import_wandb  # imports wandb only if used
from rlax_core.storage import AnyPath, Mirror, is_remote, storage_path

if TYPE_CHECKING:
    from rlax_core.config.sections.metrics import WandbSection

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class MetricsFileError(RlaxError):
    """``metrics.jsonl`` is missing or holds a line that is not a metrics record."""

    exit_code = 2


class MetricsLog:
    """Appends one JSON object per step to RUN_DIR/metrics.jsonl and the same scalars to
    TensorBoard event files under RUN_DIR/tensorboard/ (and to W&B, if asked).

    Steps must increase from one :meth:`write` to the next (the file never holds a step
    twice). Safe to call from several threads. Also a context manager. One process of a
    run writes its metrics (the trainer's leader), so only it reaches W&B.

    Args:
        run_dir: the run directory (made if missing), local or in a bucket: then the
            files are written to a local mirror and uploaded after each step, in the
            background (:meth:`sync` uploads at once).
        resume_from_step: when a run resumes from a checkpoint at step S, the lines with
            step > S already in ``metrics.jsonl`` (written after the checkpoint, before a
            crash) are dropped and the file rewritten atomically. TensorBoard gets a new
            event file that starts with a restart marker at S + 1, so TensorBoard drops
            the orphaned points of those steps too.
        wandb: the run config's ``metrics.wandb`` section: also log each step to this
            W&B run (None: no W&B, and wandb is not imported).
        run_config: the resolved run config, recorded as the W&B run's config.

    Raises:
        ConfigError: ``wandb`` is given but wandb is not installed (before any file is
            touched).
    """

    def __init__(
        self,
        run_dir: str | AnyPath,
        *,
        resume_from_step: int | None = None,
        wandb: WandbSection | None = None,
        run_config: Mapping[str, Any] | None = None,
    ) -> None:
        if wandb is not None:
            import_wandb()  # a missing extra fails here, not after the files are rewritten
        # In a bucket, the files are written to a local mirror and uploaded whole.
        self._mirror = Mirror(run_dir, pull=(METRICS_FILE,)) if is_remote(run_dir) else None
        self.run_dir = self._mirror.local if self._mirror else Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.last_step: int | None = self._prepare_file(resume_from_step)
        self._lock = threading.Lock()
        self._closed = False
        # Imported here: tensorboardX takes a second to import (it loads boto3 and
        # google-cloud-storage when installed), which readers of metrics.jsonl
        # (`rlax plot`, the launchers) need not pay.
        from rlax_core.run_dir.tensorboard import EventFile

        self._file = self.path.open("a", encoding="utf-8")
        self._events = EventFile(
            self.run_dir / TENSORBOARD_DIR,
            others=run_dir / TENSORBOARD_DIR if self._mirror else None,
        )
        if resume_from_step is not None:
            self._events.add_session_start(resume_from_step + 1, time.time())
        self._wandb: WandbRun | None = None
        if wandb is not None:
            try:
                self._wandb = WandbRun(wandb, self.run_dir, run_config=run_config)
            except BaseException:
                self._file.close()
                self._events.close()
                raise

    def _prepare_file(self, resume_from_step: int | None) -> int | None:
        """Drops a torn last line and, on resume, the lines past the checkpoint; the last step."""
        if not self.path.exists():
            return None
        lines, torn = _parse(self.path)
        kept = [(text, record) for text, record in lines
                if resume_from_step is None or record["step"] <= resume_from_step]  # fmt: skip
        if torn or len(kept) != len(lines):
            tmp = self.path.with_name(f".{METRICS_FILE}.tmp")
            with tmp.open("w", encoding="utf-8") as handle:
                handle.writelines(text + "\n" for text, _ in kept)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)  # atomic: a crash here leaves the old or the new file
        return max((record["step"] for _, record in kept), default=None)

    def write(self, step: int, metrics: Mapping[str, float | int]) -> None:
        """Writes one step's scalars as one JSON line (flushed), one TensorBoard event
        (flushed) and, with W&B on, one W&B step.

        Args:
            step: the training step; greater than the step of the previous write.
            metrics: metric name → number (int, float, a NumPy or JAX scalar). A
                ``"step"`` key, if present, must equal ``step``; ``"time"`` is reserved.

        Raises:
            TypeError: a value is not a scalar number (the message names the key).
            ValueError: ``step`` does not increase, a reserved key clashes, or the log
                is closed.
        """
        step = _integer("step", step)
        now = time.time()
        record: dict[str, Any] = {"step": step, "time": now}
        scalars: dict[str, float] = {}
        for key, raw in metrics.items():
            if not isinstance(key, str):
                raise TypeError(f"metric names must be strings, got {key!r}")
            value = _scalar(key, raw)
            if key == "step":
                if value != step:
                    raise ValueError(f"metrics['step'] is {value} but write() was given {step}")
                continue
            if key == "time":
                raise ValueError("'time' is reserved: metrics.jsonl records the wall time itself")
            finite = not (isinstance(value, float) and not math.isfinite(value))
            record[key] = value if finite else None
            if finite:
                scalars[key] = float(value)
        line = json.dumps(record, allow_nan=False) + "\n"
        with self._lock:
            if self._closed:
                raise ValueError(f"the metrics log of {self.run_dir} is closed")
            if self.last_step is not None and step <= self.last_step:
                raise ValueError(
                    f"step {step} is not after step {self.last_step}, already in {self.path}: "
                    "write each step once, in order (resume with resume_from_step)"
                )
            self._file.write(line)
            self._file.flush()
            self._events.add_scalars(step, scalars, now)
            self.last_step = step  # the line is written: W&B failing must not let it repeat
            if self._mirror is not None:
                self._mirror.push()
            if self._wandb is not None:
                self._wandb.log(step, scalars)

    def sync(self) -> None:
        """Uploads the files now, for a run directory in a bucket (no-op for a local one).

        Raises:
            OSError: the upload failed.
        """
        if self._mirror is not None:
            self._mirror.flush()

    def close(self) -> None:
        """Closes the files and finishes the W&B run; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.close()
            self._events.close()
            if self._mirror is not None:
                self._mirror.close()
            if self._wandb is not None:
                self._wandb.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def read_metrics(run_dir: str | AnyPath) -> list[dict]:
    """The records of ``RUN_DIR/metrics.jsonl``, in file order (``null`` for non-finite values).

    A truncated last line (a crash mid-write) is ignored.

    Raises:
        MetricsFileError: the file is missing, or a line other than the last is not a
            JSON object with an integer ``step`` (the message names the line number).
    """
    path = (storage_path(run_dir) if isinstance(run_dir, str) else run_dir) / METRICS_FILE
    if not path.is_file():
        raise MetricsFileError(
            f"no {METRICS_FILE} in {run_dir}: give the directory of a run (`rlax train` "
            "writes its metrics there)"
        )
    lines, _ = _parse(path)
    return [record for _, record in lines]


def _parse(path: Path) -> tuple[list[tuple[str, dict]], bool]:
    """(line text, record) for each complete line, and whether a torn last line was dropped."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    pieces = text.split("\n")
    # Every line ends with "\n", so the piece after the last one is empty unless the
    # writer died mid-line; that tail is kept only if it is a whole record.
    tail = pieces.pop()
    lines = [(n, piece) for n, piece in enumerate(pieces, 1) if piece.strip()]
    torn = False
    if tail.strip():
        try:
            _record(path, len(pieces) + 1, tail)
            lines.append((len(pieces) + 1, tail))
        except MetricsFileError:
            pass
        torn = True  # even a whole tail needs its "\n" before the next append
    return [(piece, _record(path, n, piece)) for n, piece in lines], torn


def _record(path: Path, number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise MetricsFileError(f"{path} line {number}: not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise MetricsFileError(
            f"{path} line {number}: expected a JSON object, got {type(record).__name__}"
        )
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise MetricsFileError(f"{path} line {number}: no integer 'step' (got {step!r})")
    return record


def _integer(key: str, value: Any) -> int:
    number = _scalar(key, value)
    if not isinstance(number, int):
        raise TypeError(f"{key} must be an integer, got {type(value).__name__} {value!r}")
    return number


def _scalar(key: str, value: Any) -> int | float:
    """``value`` as a Python int or float; NumPy and JAX scalars (shape ()) included."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return _scalar(key, value.item())
    raise TypeError(
        f"metric {key!r} must be a scalar number (int or float), got {type(value).__name__}"
    )
