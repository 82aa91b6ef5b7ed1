"""What this process holds in memory: resident and peak bytes, and JAX's live arrays.

The trainer logs these every step (``memory/*``), so a run's memory is a curve in its
metrics: growth from step to step is a leak, and the peak says how close a run came to
the machine's limit. ``psutil`` reads the resident set portably; the peak is the
kernel's high-water mark.
"""

from __future__ import annotations

import resource
import sys

import jax
import psutil

_GIB = 1 << 30


def rss_bytes() -> int:
    """This process's resident set size now."""
    return psutil.Process().memory_info().rss


def peak_rss_bytes() -> int:
    """The most this process has had resident since it started."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def live_array_bytes() -> int:
    """Bytes of every JAX array alive in this process, each buffer counted once."""
    seen: set[int] = set()
    total = 0
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            data = shard.data
            try:
                key = data.unsafe_buffer_pointer()
            except Exception:
                key = id(data)
            if key not in seen:
                seen.add(key)
                total += data.nbytes
    return total


def memory_metrics() -> dict[str, float]:
    """``memory/rss_gib``, ``memory/peak_rss_gib`` and ``memory/arrays_gib``."""
    return {
        "memory/rss_gib": rss_bytes() / _GIB,
        "memory/peak_rss_gib": peak_rss_bytes() / _GIB,
        "memory/arrays_gib": live_array_bytes() / _GIB,
    }
