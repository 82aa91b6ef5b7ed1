"""Scalars to TensorBoard event files, written with tensorboardX.

tensorboardX frames the records (TFRecords with their CRC32C) and defines the ``Event``
protobufs. What RLAX adds on top, and why it does not use ``SummaryWriter``:

- Each event is written and flushed before the call returns. ``SummaryWriter`` hands
  events to a background thread, and its ``flush()`` does not wait for that thread, so
  a killed run could lose steps that ``metrics.jsonl`` already holds.
- One event per step holds all of that step's scalars, under the metric names as given
  (``SummaryWriter.add_scalar`` rewrites names such as ``eval/pass@1``).
- File names sort in the order the files were made. TensorBoard reads every file of a
  directory whose name holds ``tfevents`` in sorted name order, so a resumed run's file
  must sort after the earlier ones; tensorboardX names files by the second (and a
  second writer within that second would overwrite the first).
- A resumed run's file starts with a ``SessionLog`` START at step S: TensorBoard then
  drops every scalar it already read with a step ≥ S, so the steps written after the
  last checkpoint by a run that then crashed do not show twice.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from tensorboardX import RecordWriter
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.summary_pb2 import Summary

from rlax_core.storage import AnyPath

FILE_VERSION = "brain.Event:2"


class EventFile:
    """Writes scalar events to a new event file in ``log_dir``; each write is flushed.

    The file, ``events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>``, is named
    with a timestamp later than that of every event file already in ``log_dir``, so
    TensorBoard reads it after them even when a run resumes within the second it crashed.
    """

    def __init__(self, log_dir: str | Path, *, others: AnyPath | None = None) -> None:
        """``others``: a folder whose event files the new file must also come after (the
        bucket folder a local ``log_dir`` is uploaded to)."""
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        folders = [self.log_dir] if others is None else [self.log_dir, others]
        stamps = [s + 1 for folder in folders for s in _stamps(folder)]
        stamp = max([int(time.time()), *stamps])
        self.path = self.log_dir / (
            f"events.out.tfevents.{stamp:010d}.{socket.gethostname()}.{os.getpid()}"
        )
        self._writer = RecordWriter(str(self.path))
        self._closed = False
        self._append(Event(wall_time=time.time(), step=0, file_version=FILE_VERSION))

    def add_scalars(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None:
        """Writes one event holding every scalar of ``step``; none, no event.

        Values are stored as float32 (TensorBoard's ``simple_value``): rounded to 24
        significant bits, and ±inf beyond float32's range.
        """
        if scalars:
            summary = Summary(
                value=[Summary.Value(tag=tag, simple_value=v) for tag, v in scalars.items()]
            )
            self._append(Event(wall_time=wall_time, step=step, summary=summary))

    def add_session_start(self, step: int, wall_time: float) -> None:
        """Marks a restart at ``step``: TensorBoard drops what it read for steps ≥ ``step``."""
        start = SessionLog(status=SessionLog.START)
        self._append(Event(wall_time=wall_time, step=step, session_log=start))

    def _append(self, event: Event) -> None:
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def close(self) -> None:
        """Closes the file; idempotent."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def _stamps(folder: AnyPath) -> list[int]:
    """The timestamps in the names of the event files in ``folder``."""
    stamps = []
    for path in folder.glob("events.out.tfevents.*") if folder.exists() else ():
        field = path.name.split(".")[3]
        if field.isdigit():
            stamps.append(int(field))
    return stamps
