"""Host arrays as they cross a transport: dtype names, byte views and checksums.

Weights move between processes as raw bytes plus a small manifest (name, dtype, shape,
checksum), never as pickles. This module is the one place that turns an array into
those pieces and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import blake3
import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with NumPy)
import numpy as np
import xxhash

# XXH3-128 hashes at ~10 GB/s on one core and releases the GIL, so verifying a
# checksum costs a small fraction of moving the same bytes (sha256: ~1.3 GB/s,
# crc32: ~2.2 GB/s, measured on the CI machine). It detects corruption, not forgery.
CHECKSUM_ALGORITHM = "xxh3-128"
# A signed version's digests must resist forgery, or new bytes could be made to match a
# signed checksum: BLAKE3 is a cryptographic hash at about a fifth of XXH3's speed (and
# 3-5x sha256's), releasing the GIL too.
SIGNED_CHECKSUM_ALGORITHM = "blake3"
_HASHERS: dict[str, Any] = {"xxh3-128": xxhash.xxh3_128, "blake3": blake3.blake3}
CHECKSUM_ALGORITHMS = tuple(_HASHERS)

SUPPORTED_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
)

# Tensors at least this large are hashed on worker threads (xxhash releases the GIL).
_PARALLEL_HASH_BYTES = 8 << 20


def dtype_from_name(name: str) -> np.dtype:
    """Returns the NumPy dtype for a transport dtype name such as ``"bfloat16"``.

    Raises:
        ValueError: the name is not one of :data:`SUPPORTED_DTYPES`.
    """
    if name not in SUPPORTED_DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return np.dtype(name)


def as_host_array(name: str, value: Any) -> np.ndarray:
    """Returns ``value`` (a NumPy or JAX array) as a C-contiguous host array.

    No copy is made when the value already is one.

    Raises:
        TypeError: the value is not an array of a supported dtype.
    """
    if not hasattr(value, "__array__") and not isinstance(value, np.ndarray):
        raise TypeError(
            f"parameter {name!r} is a {type(value).__name__}, not an array; "
            "publish NumPy or JAX arrays"
        )
    array = np.asarray(value)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # (not for 0-d arrays: it would make them 1-d)
    if array.dtype.name not in SUPPORTED_DTYPES:
        raise TypeError(
            f"parameter {name!r} has dtype {array.dtype}; supported: {', '.join(SUPPORTED_DTYPES)}"
        )
    return array


ALIGNMENT = 64  # bytes: what XLA's CPU client needs to use host memory in place


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A private, C-contiguous copy of ``array`` whose data starts on a 64-byte boundary.

    NumPy aligns to 16 bytes; JAX on the CPU uses host memory without copying it only
    when it is 64-byte aligned (``jax.device_put(..., may_alias=True)``). A parameter
    store's versions are such copies, so an inference worker in the same process
    samples from the store's bytes instead of a second copy of the policy.
    """
    raw = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out


def byte_view(array: np.ndarray) -> memoryview:
    """A flat, read-only byte view of a C-contiguous array (no copy)."""
    return memoryview(array.reshape(-1).view(np.uint8)).toreadonly()


def hasher(algorithm: str) -> Any:
    """A new incremental hasher of ``algorithm`` (one of :data:`CHECKSUM_ALGORITHMS`).

    Raises:
        ValueError: an unknown algorithm.
    """
    try:
        return _HASHERS[algorithm]()
    except KeyError:
        raise ValueError(
            f"unknown checksum algorithm {algorithm!r}; known: {', '.join(_HASHERS)}"
        ) from None


def tensor_checksum(array: np.ndarray, algorithm: str = CHECKSUM_ALGORITHM) -> str:
    """The checksum of an array's bytes, as hex digits (XXH3-128 unless told)."""
    if algorithm == CHECKSUM_ALGORITHM:
        return xxhash.xxh3_128_hexdigest(byte_view(array))
    digest = hasher(algorithm)
    digest.update(byte_view(array))
    return digest.hexdigest()


class IncomingChecksum:
    """The checksum of a tensor whose bytes arrive in pieces, each at its offset.

    Pieces that arrive in order are hashed as they land, while they are still in cache,
    which costs less than hashing the array once it is complete. Once a piece arrives
    out of order the running hash is dropped, and :meth:`hexdigest` hashes the whole
    array instead: the result is :func:`tensor_checksum` of the array either way.
    """

    def __init__(self, algorithm: str = CHECKSUM_ALGORITHM) -> None:
        self.algorithm = algorithm
        self._hasher: Any = hasher(algorithm)
        self._next = 0  # offset the next in-order piece starts at

    def add(self, offset: int, piece: Any) -> None:
        """Notes that ``piece`` (bytes-like) landed at byte ``offset`` of the tensor."""
        if self._hasher is None:
            return
        if offset != self._next:
            self._hasher = None
            return
        self._hasher.update(piece)
        self._next += len(piece)

    def hexdigest(self, array: np.ndarray) -> str:
        """The checksum of ``array``, the tensor whose pieces were added."""
        if self._hasher is None or self._next != array.nbytes:
            return tensor_checksum(array, self.algorithm)
        return self._hasher.hexdigest()


def tensor_checksums(
    arrays: Mapping[str, np.ndarray], algorithm: str = CHECKSUM_ALGORITHM
) -> dict[str, str]:
    """Checksums of many arrays, hashing the large ones on parallel threads."""

    def one(name: str) -> str:
        return tensor_checksum(arrays[name], algorithm)

    large = [name for name, a in arrays.items() if a.nbytes >= _PARALLEL_HASH_BYTES]
    result = {name: one(name) for name in arrays if name not in large}
    if len(large) == 1:
        result[large[0]] = one(large[0])
    elif large:
        with ThreadPoolExecutor(max_workers=min(8, len(large))) as pool:
            for name, digest in zip(large, pool.map(one, large), strict=True):
                result[name] = digest
    return {name: result[name] for name in arrays}


def manifest_checksum(
    entries: list[tuple[str, str, tuple[int, ...], str]], algorithm: str = CHECKSUM_ALGORITHM
) -> str:
    """The checksum of a whole version: names, dtypes, shapes and tensor checksums.

    Args:
        entries: ``(name, dtype, shape, tensor_checksum)`` for every tensor.
        algorithm: the hash (the tensors' own).
    """
    h = hasher(algorithm)
    for name, dtype, shape, digest in sorted(entries):
        h.update(f"{name}\0{dtype}\0{','.join(map(str, shape))}\0{digest}\n".encode())
    return h.hexdigest()
