"""Reading and writing the safetensors format without copying whole checkpoints.

A reader maps a local file and hands out read-only NumPy views of each tensor, so a
loader copies only the slices it places on devices, then releases the pages it read. A
file in a bucket (``gs://``, ``s3://``) is read with one ranged request per tensor, so a
load holds at most the tensor being placed, never the whole file. A writer
streams tensors one at a time into a temporary file and renames it into place, so a
crash never leaves a half-written checkpoint under the final name.

Format: 8-byte little-endian header length, a JSON header mapping each name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of the
header) plus an optional ``"__metadata__"`` of strings, then the data.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from rlax_core.errors import RlaxError
from rlax_core.storage import AnyPath, filesystem, is_remote, storage_path

DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16),
    "U16": np.dtype(np.uint16),
    "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32),
    "I64": np.dtype(np.int64),
    "U64": np.dtype(np.uint64),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}
_MAX_HEADER = 100 << 20


class CheckpointError(RlaxError):
    """A checkpoint file or directory cannot be used; the message names file and problem."""

    exit_code = 2


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lies in a safetensors file."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int  # absolute file offset
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        return self.end - self.begin


class SafetensorsReader:
    """Maps one local ``.safetensors`` file, or reads one in a bucket by ranges, and
    validates its header.

    Raises:
        CheckpointError: the file is missing, truncated, or its header is malformed.
    """

    def __init__(self, path: str | AnyPath) -> None:
        self.path = storage_path(path) if isinstance(path, str) else path
        self._file = None
        self._map: mmap.mmap | None = None
        self._remote = filesystem(self.path) if is_remote(self.path) else None
        try:
            if self._remote is not None:
                size = self._remote.size(str(self.path))
            else:
                self._file = open(self.path, "rb")  # noqa: SIM115  (closed in close())
                size = os.fstat(self._file.fileno()).st_size
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot open: {exc.strerror or exc}") from None
        try:
            self.entries, self.metadata = self._read_header(size)
            if self._file is not None and size:
                self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except BaseException:
            self.close()
            raise

    def _read(self, begin: int, end: int) -> bytes:
        """Bytes ``[begin, end)`` of the file."""
        if self._remote is not None:
            data = self._remote.cat_file(str(self.path), start=begin, end=end)
        else:
            assert self._file is not None
            self._file.seek(begin)
            data = self._file.read(end - begin)
        if len(data) != end - begin:
            raise CheckpointError(
                f"{self.path}: truncated: bytes {begin}..{end} were asked for, "
                f"{len(data)} came back (the file changed while it was read?)"
            )
        return data

    def _read_header(self, size: int) -> tuple[dict[str, TensorEntry], dict[str, str]]:
        if size < 8:
            raise CheckpointError(f"{self.path}: truncated safetensors file ({size} bytes)")
        (header_len,) = struct.unpack("<Q", self._read(0, 8))
        if header_len > min(_MAX_HEADER, size - 8):
            raise CheckpointError(
                f"{self.path}: header claims {header_len} bytes but the file has {size}; "
                "the file is truncated or not safetensors"
            )
        try:
            header = json.loads(self._read(8, 8 + header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{self.path}: malformed safetensors header: {exc}") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: safetensors header is not a JSON object")
        metadata = header.pop("__metadata__", None) or {}
        data_start = 8 + header_len
        entries = {}
        for name, info in header.items():
            try:
                dtype = DTYPES[info["dtype"]]
                shape = tuple(int(d) for d in info["shape"])
                begin, end = (int(o) for o in info["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} has a malformed header entry {info!r}"
                ) from None
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if end - begin != expected or begin < 0:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} claims {end - begin} bytes for "
                    f"{info['dtype']}{list(shape)} ({expected} bytes)"
                )
            if data_start + end > size:
                raise CheckpointError(
                    f"{self.path}: truncated: tensor {name!r} ends at byte {data_start + end} "
                    f"but the file has {size} bytes"
                )
            entries[name] = TensorEntry(name, dtype, shape, data_start + begin, data_start + end)
        return entries, metadata

    def array(self, name: str) -> np.ndarray:
        """A read-only view of the tensor's bytes in the file (no copy); for a file in a
        bucket, the tensor's bytes, read with one ranged request."""
        entry = self.entries[name]
        if entry.nbytes == 0:
            return np.zeros(entry.shape, entry.dtype)
        if self._remote is not None:
            return np.frombuffer(self._read(entry.begin, entry.end), entry.dtype).reshape(
                entry.shape
            )
        flat = np.frombuffer(self._map, entry.dtype, count=entry.nbytes // entry.dtype.itemsize,
                             offset=entry.begin)  # fmt: skip
        return flat.reshape(entry.shape)

    def release(self, name: str) -> None:
        """Drops the tensor's pages from this process's resident memory (after a copy)."""
        entry = self.entries[name]
        if self._map is None or entry.nbytes == 0:
            return
        page = mmap.PAGESIZE
        start = entry.begin // page * page
        self._map.madvise(mmap.MADV_DONTNEED, start, entry.end - start)

    def close(self) -> None:
        """Unmaps and closes the file."""
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view is alive; the GC unmaps it later
                self._map.close()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> SafetensorsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_safetensors(
    path: str | Path,
    tensors: Iterable[tuple[str, tuple[int, ...], np.dtype, Callable[[], np.ndarray]]],
    metadata: dict[str, str] | None = None,
) -> int:
    """Writes tensors to ``path`` atomically, fetching each one's data only when written.

    Args:
        tensors: ``(name, shape, dtype, get_data)``; ``get_data()`` returns the host array
            (gathered from devices at that moment, so at most one tensor is on the host).
        metadata: string metadata for the header.

    Returns:
        Bytes of tensor data written.
    """
    path = Path(path)
    specs = sorted(tensors, key=lambda t: t[0])
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for name, shape, dtype, _ in specs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {
            "dtype": _CODES[np.dtype(dtype)],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # align the data to 8 bytes
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            for name, shape, dtype, get_data in specs:
                data = np.ascontiguousarray(get_data(), dtype=np.dtype(dtype))
                if data.shape != tuple(shape):
                    raise ValueError(f"tensor {name!r} is {data.shape}, declared {tuple(shape)}")
                out.write(memoryview(data.reshape(-1).view(np.uint8)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return offset
