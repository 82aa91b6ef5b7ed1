"""The committed generated code matches the .proto; the bulk codec matches protobuf."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import pytest

from rlax_transport_grpc import wire
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "generate_proto.py"


def test_generated_code_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("generate_proto", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = module.generate(Path(tmp))
    for name, text in fresh.items():
        committed = (module.PROTO_DIR / name).read_text()
        assert committed == text, f"{name} is stale: run {SCRIPT.name}"


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 1 << 20])
def test_chunk_frames_are_the_protobuf_encoding(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    frame = wire.encode_chunk(3, 1 << 33, memoryview(data))
    parsed = pb.TensorChunk.FromString(frame)
    assert (parsed.tensor, parsed.offset, parsed.data) == (3, 1 << 33, data)
    tensor, offset, view = wire.decode_chunk(frame)
    assert (tensor, offset, bytes(view)) == (3, 1 << 33, data)
    # A frame protobuf wrote (it omits zero fields) is read too.
    tensor, offset, view = wire.decode_chunk(pb.TensorChunk(data=data).SerializeToString())
    assert (tensor, offset, bytes(view)) == (0, 0, data)


def test_publish_frames_are_the_protobuf_encoding() -> None:
    frame = wire.encode_publish_chunk(2, 4096, memoryview(b"abc"))
    parsed = pb.PublishFrame.FromString(frame)
    assert parsed.WhichOneof("frame") == "chunk"
    assert (parsed.chunk.tensor, parsed.chunk.offset, parsed.chunk.data) == (2, 4096, b"abc")
    tensor, offset, view = wire.decode_publish_frame(frame)
    assert (tensor, offset, bytes(view)) == (2, 4096, b"abc")
    manifest = wire.decode_publish_frame(wire.encode_manifest_frame(b'{"v":1}'))
    assert isinstance(manifest, pb.Manifest) and manifest.policy_json == b'{"v":1}'
