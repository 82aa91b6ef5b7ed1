"""Bulk frames of the gRPC transport, without copying weights through protobuf objects.

``TensorChunk`` (see rlax_transport.proto) carries up to ``chunk_mb`` MiB of raw tensor
bytes. Building it with the protobuf class copies the bytes into the message and again
into the serialised string; reading a ``bytes`` field copies once more. These functions
write the same wire encoding directly (one copy, into the frame) and read it as views
into the received frame (no copy). A test checks both against the protobuf classes.
"""

from __future__ import annotations

import struct

from rlax_transport_grpc.proto import rlax_transport_pb2 as pb

# TensorChunk: field 1 (fixed32) tag 0x0d, field 2 (fixed64) tag 0x11, field 3 (bytes) 0x1a.
_HEAD = struct.Struct("<BIBQB")
_PUBLISH_CHUNK_TAG = 0x12  # PublishFrame field 2 (chunk), length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(frame: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _chunk_head(tensor: int, offset: int, size: int) -> bytes:
    return _HEAD.pack(0x0D, tensor, 0x11, offset, 0x1A) + _varint(size)


def encode_chunk(tensor: int, offset: int, data: memoryview | bytes) -> bytes:
    """A serialised ``TensorChunk``."""
    return b"".join((_chunk_head(tensor, offset, len(data)), data))


def encode_publish_chunk(tensor: int, offset: int, data: memoryview | bytes) -> bytes:
    """A serialised ``PublishFrame`` holding a chunk."""
    head = _chunk_head(tensor, offset, len(data))
    inner = len(head) + len(data)
    return b"".join((bytes([_PUBLISH_CHUNK_TAG]), _varint(inner), head, data))


def decode_chunk(frame: bytes) -> tuple[int, int, memoryview]:
    """``(tensor, offset, data)`` of a serialised ``TensorChunk``; data is a view of frame."""
    view = memoryview(frame)
    if len(view) >= _HEAD.size and view[0] == 0x0D and view[5] == 0x11 and view[14] == 0x1A:
        _, tensor, _, offset, _ = _HEAD.unpack_from(view)
        size, at = _read_varint(view, _HEAD.size)
        if at + size == len(view):
            return tensor, offset, view[at:]
    message = pb.TensorChunk.FromString(bytes(frame))  # another encoder's layout: slow path
    return message.tensor, message.offset, memoryview(message.data)


def decode_publish_frame(frame: bytes) -> pb.Manifest | tuple[int, int, memoryview]:
    """A ``PublishFrame``: its manifest, or ``(tensor, offset, data)`` of its chunk."""
    view = memoryview(frame)
    if len(view) and view[0] == _PUBLISH_CHUNK_TAG:
        size, at = _read_varint(view, 1)
        if at + size == len(view):
            return decode_chunk(view[at:])  # type: ignore[arg-type]
    message = pb.PublishFrame.FromString(bytes(frame))
    if message.WhichOneof("frame") == "chunk":
        chunk = message.chunk
        return chunk.tensor, chunk.offset, memoryview(chunk.data)
    return message.manifest


def encode_manifest_frame(policy_json: bytes) -> bytes:
    """A serialised ``PublishFrame`` holding the manifest (the first frame of a publish)."""
    return pb.PublishFrame(manifest=pb.Manifest(policy_json=policy_json)).SerializeToString()
