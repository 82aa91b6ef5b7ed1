"""Scalars to TensorBoard event files, written by hand: no TensorFlow, no tensorboardX.

An event file is a sequence of TFRecords, each holding one serialized ``Event``
protobuf. The file is named ``events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>``;
TensorBoard reads every file of a directory whose name holds ``tfevents``, in sorted
name order, so a later file (a resumed run) must sort after the earlier ones.

TFRecord framing, all integers little-endian::

    uint64  length                  # of data
    uint32  masked_crc32c(length)   # CRC of the 8 length bytes
    bytes   data[length]            # the serialized Event
    uint32  masked_crc32c(data)

    masked_crc32c(b) = ((c >> 15 | c << 17) + 0xA282EAD8) mod 2**32,  c = crc32c(b)

CRC32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, initial value and final
xor 0xFFFFFFFF), computed here from a 256-entry table.

The protobuf messages (proto3; only the fields RLAX writes)::

    Event        { double wall_time = 1; int64 step = 2;
                   oneof what {                    # one per event
                     string file_version = 3;      # "brain.Event:2", the first event
                     Summary summary = 5;
                     SessionLog session_log = 7; } }
    Summary      { repeated Value value = 1; }
    Summary.Value{ string tag = 1; float simple_value = 2; }
    SessionLog   { SessionStatus status = 1; }      # START = 1

Each field is a key varint ``(field_number << 3) | wire_type`` followed by its value:
wire type 0 (varint) for ``step`` and ``status``, 1 (8 bytes) for the double, 5 (4 bytes)
for the float, 2 (varint length + bytes) for strings and nested messages. A negative
``step`` is its 64-bit two's complement as a 10-byte varint.

A ``SessionLog`` START event at step S tells TensorBoard that the run restarted at S:
it drops every scalar it already read with a step ≥ S, so the steps written after the
last checkpoint by a run that then crashed do not show twice.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path

FILE_VERSION = "brain.Event:2"
_SESSION_START = 1


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """The CRC32C (Castagnoli) checksum of ``data``, e.g. ``crc32c(b"123456789") == 0xE3069283``."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of ``data``, rotated and offset as TFRecord stores it."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    """``data`` framed as one TFRecord: length, its masked CRC, data, the data's masked CRC."""
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64 fields: negatives as 64-bit two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _float32(value: float) -> bytes:
    try:
        return struct.pack("<f", value)
    except OverflowError:  # finite in float64, beyond float32: TensorBoard shows ±inf
        return struct.pack("<f", math.copysign(math.inf, value))


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def encode_event(
    wall_time: float,
    step: int,
    *,
    file_version: str | None = None,
    scalars: Mapping[str, float] | None = None,
    session_start: bool = False,
) -> bytes:
    """One ``Event`` message, serialized.

    An event holds one of ``file_version``, ``scalars`` and ``session_start`` (a protobuf
    ``oneof``: a reader would keep only the last).

    Args:
        wall_time: seconds since the Unix epoch.
        step: the training step the event belongs to.
        file_version: set on the first event of a file only (``"brain.Event:2"``).
        scalars: tag → value, written as one ``Summary`` of ``simple_value`` floats
            (float32, so values are rounded to 24 significant bits).
        session_start: write a ``SessionLog`` START (a restart at ``step``).
    """
    if (file_version is not None) + bool(scalars) + session_start > 1:
        raise ValueError("an event holds one of file_version, scalars and session_start")
    out = bytearray(_varint(1 << 3 | 1) + struct.pack("<d", wall_time))
    out += _varint(2 << 3 | 0) + _varint(step)
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if scalars:
        summary = bytearray()
        for tag, value in scalars.items():
            encoded = _length_delimited(1, tag.encode()) + _varint(2 << 3 | 5)
            encoded += _float32(value)
            summary += _length_delimited(1, encoded)
        out += _length_delimited(5, bytes(summary))
    if session_start:
        out += _length_delimited(7, _varint(1 << 3 | 0) + _varint(_SESSION_START))
    return bytes(out)


class EventFileWriter:
    """Writes scalar events to a new event file in ``log_dir``; each write is flushed.

    The file name's timestamp is later than that of every event file already in
    ``log_dir``, so TensorBoard reads this file after them even when a run resumes
    within the second it crashed.
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = max([int(time.time()), *(s + 1 for s in self._existing_stamps())])
        self.path = self.log_dir / (
            f"events.out.tfevents.{stamp:010d}.{socket.gethostname()}.{os.getpid()}"
        )
        self._file = self.path.open("xb")
        self._append(encode_event(time.time(), 0, file_version=FILE_VERSION))

    def _existing_stamps(self) -> list[int]:
        stamps = []
        for path in self.log_dir.glob("events.out.tfevents.*"):
            field = path.name.split(".")[3]
            if field.isdigit():
                stamps.append(int(field))
        return stamps

    def add_scalars(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None:
        """Writes one event holding every scalar of ``step`` (finite floats only)."""
        if scalars:
            self._append(encode_event(wall_time, step, scalars=scalars))

    def add_session_start(self, step: int, wall_time: float) -> None:
        """Marks a restart at ``step``: TensorBoard drops what it read for steps ≥ ``step``."""
        self._append(encode_event(wall_time, step, session_start=True))

    def _append(self, event: bytes) -> None:
        self._file.write(tfrecord(event))
        self._file.flush()

    def close(self) -> None:
        """Closes the file; idempotent."""
        self._file.close()
