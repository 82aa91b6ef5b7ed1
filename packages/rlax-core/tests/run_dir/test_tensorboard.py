"""The hand-written TensorBoard event files, checked against TensorBoard's own code."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from tensorboard.summary.writer.record_writer import RecordWriter

from rlax_core.run_dir.tensorboard import (
    FILE_VERSION,
    EventFileWriter,
    crc32c,
    encode_event,
    masked_crc32c,
    tfrecord,
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),
        # RFC 3720 (iSCSI) appendix B.4 test vectors.
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_crc32c_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def test_masked_crc_matches_tensorboard() -> None:
    rng = random.Random(0)
    for size in (0, 1, 7, 8, 100, 4096):
        data = rng.randbytes(size)
        assert masked_crc32c(data) == pywrap_tensorflow.masked_crc32c(data)


def test_tfrecord_framing_matches_tensorboards_record_writer() -> None:
    for data in (b"", b"x", bytes(range(256)) * 3):
        sink = io.BytesIO()
        RecordWriter(sink).write(data)
        assert tfrecord(data) == sink.getvalue()


def test_event_bytes_equal_protobufs_serialization() -> None:
    # Non-zero fields only: proto3 leaves zero scalars out, RLAX always writes them.
    scalars = {"reward/mean": 0.75, "loss/total": -1.5, "throughput/samples_per_s": 1234.5}
    ours = encode_event(1700000000.25, 42, scalars=scalars)
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in scalars.items()]
    )
    reference = event_pb2.Event(wall_time=1700000000.25, step=42, summary=summary)
    assert ours == reference.SerializeToString()
    first = encode_event(1.5, 7, file_version=FILE_VERSION)
    assert (
        first
        == event_pb2.Event(wall_time=1.5, step=7, file_version=FILE_VERSION).SerializeToString()
    )
    restart = event_pb2.Event(
        wall_time=10.0, step=3, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    )
    assert encode_event(10.0, 3, session_start=True) == restart.SerializeToString()


@pytest.mark.parametrize("step", [0, 1, 127, 128, 2**40, -1, -(2**63)])
def test_event_parses_with_protobuf(step: int) -> None:
    event = event_pb2.Event.FromString(encode_event(0.0, step, scalars={"a": 1e39, "b": -3.25}))
    assert event.step == step and event.wall_time == 0.0
    # 1e39 is finite in float64 but not in float32: TensorBoard gets inf.
    assert [(v.tag, v.simple_value) for v in event.summary.value] == [("a", np.inf), ("b", -3.25)]
    restart = event_pb2.Event.FromString(encode_event(2.5, step, session_start=True))
    assert restart.step == step and restart.wall_time == 2.5
    assert restart.session_log.status == event_pb2.SessionLog.START


def test_an_event_holds_one_thing() -> None:
    with pytest.raises(ValueError, match="one of"):
        encode_event(0.0, 1, scalars={"a": 1.0}, session_start=True)


def _records(path: Path) -> list[bytes]:
    """The records of an event file, read by TensorBoard's reader (which checks the CRCs)."""
    reader = pywrap_tensorflow.PyRecordReader_New(str(path))
    records = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return records
        records.append(reader.record())


def test_event_file_reads_back_in_tensorboard(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    values = {step: {"reward/mean": step / 7, "grad_norm": 10.0**step} for step in range(6)}
    for step, scalars in values.items():
        writer.add_scalars(step, scalars, wall_time=1000.0 + step)
    writer.add_scalars(6, {}, wall_time=1006.0)  # nothing to log: no event
    writer.close()
    writer.close()

    events = [event_pb2.Event.FromString(r) for r in _records(writer.path)]
    assert events[0].file_version == FILE_VERSION
    assert len(events) == 1 + len(values)

    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert sorted(accumulator.Tags()["scalars"]) == ["grad_norm", "reward/mean"]
    for tag in ("reward/mean", "grad_norm"):
        read = accumulator.Scalars(tag)
        assert [e.step for e in read] == list(values)
        assert [e.wall_time for e in read] == [1000.0 + s for s in values]
        assert [e.value for e in read] == [float(np.float32(values[s][tag])) for s in values]


def test_a_corrupted_byte_fails_tensorboards_crc_check(tmp_path: Path) -> None:
    writer = EventFileWriter(tmp_path)
    writer.add_scalars(1, {"reward/mean": 0.5}, wall_time=1.0)
    writer.close()
    assert len(_records(writer.path)) == 2
    data = bytearray(writer.path.read_bytes())
    data[-6] ^= 0x01  # inside the last event's data
    writer.path.write_bytes(bytes(data))
    with pytest.raises(errors.DataLossError, match="crc32 check"):
        _records(writer.path)


def test_a_later_writer_sorts_after_the_earlier_ones(tmp_path: Path) -> None:
    # Three writers within the same second still get names in the order they were made.
    paths = []
    for _ in range(3):
        writer = EventFileWriter(tmp_path)
        writer.close()
        paths.append(writer.path)
    assert sorted(paths) == paths and len(set(paths)) == 3
    assert all(str(os.getpid()) in p.name and "tfevents" in p.name for p in paths)


def test_session_start_drops_the_orphaned_steps(tmp_path: Path) -> None:
    first = EventFileWriter(tmp_path)
    for step in range(6):
        first.add_scalars(step, {"x": float(step)}, wall_time=float(step))
    first.close()
    second = EventFileWriter(tmp_path)
    second.add_session_start(3, wall_time=10.0)
    for step in (3, 4):
        second.add_scalars(step, {"x": 100.0 + step}, wall_time=10.0 + step)
    second.close()
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("x")] == [
        (0, 0.0), (1, 1.0), (2, 2.0), (3, 103.0), (4, 104.0)
    ]  # fmt: skip
