"""Malloc settings for processes that stream weights through short-lived buffers.

A transport that receives a chunk as a fresh ``bytes`` (gRPC's Python API gives no
other way) allocates and frees megabytes per chunk. glibc serves such sizes with
``mmap`` and returns them with ``munmap``, or trims them off its heap when freed, so
every chunk's pages fault in again: on the machines we measured, that made the page
faults, not the copies, the cost of a fetch. Raising the mmap threshold and the trim
threshold lets freed chunks be reused from the heap instead.

Process-wide and idempotent. Only glibc is tuned; elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 64 << 20  # chunks up to this size come from the heap
_TRIM_THRESHOLD = 512 << 20  # free heap kept before returning it to the system

_lock = threading.Lock()
_tuned: bool | None = None


def reuse_transfer_buffers() -> bool:
    """Lets this process reuse freed chunk-sized buffers instead of faulting them in anew.

    Returns:
        True when glibc accepted the settings (now or on an earlier call).
    """
    global _tuned
    with _lock:
        if _tuned is None:
            _tuned = _mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and _mallopt(
                _M_TRIM_THRESHOLD, _TRIM_THRESHOLD
            )
        return _tuned


def _mallopt(option: int, value: int) -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return False
    return bool(mallopt(ctypes.c_int(option), ctypes.c_int(value)))
