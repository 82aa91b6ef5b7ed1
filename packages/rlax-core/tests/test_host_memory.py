"""Freed transfer buffers are reused instead of faulting their pages in again."""

from __future__ import annotations

import json
import subprocess
import sys

_CHURN = """
import json, resource, sys
from rlax_core.transport.host_memory import reuse_transfer_buffers
tuned = reuse_transfer_buffers() if sys.argv[1] == "tuned" else None
keep = b"k" * (1 << 20)  # something live on the heap, as in a real process
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(32):
    # As in a gRPC fetch: the library's buffer and the bytes made from it, both 8 MiB,
    # alive together, then dropped.
    received = b"c" * (8 << 20)
    chunk = received[1:] + b"c"
    del received, chunk
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def _faults(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    return json.loads(out.stdout)


def test_chunk_churn_stops_faulting_pages_in() -> None:
    plain, tuned = _faults("plain"), _faults("tuned")
    assert tuned["tuned"] is True  # glibc (the CI machines run Debian)
    pages_per_chunk = (8 << 20) // 4096
    # Untuned, glibc trims the freed chunks off its heap (or unmaps them): every chunk
    # faults its pages in again.
    assert plain["faults"] > 32 * pages_per_chunk, plain
    # Tuned, the first chunks' pages are reused by the next ones.
    assert tuned["faults"] < 8 * pages_per_chunk, tuned


_MAPPED = """
import ctypes, json, sys
import numpy as np
from rlax_core.transport.host_memory import return_freed_memory, reuse_transfer_buffers

class MallInfo2(ctypes.Structure):  # glibc >= 2.33
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = MallInfo2
released = return_freed_memory() if sys.argv[1] == "released" else None
reuse = reuse_transfer_buffers() if sys.argv[1] == "released" else None
np.ones(8 << 18, np.float32)  # an 8 MiB buffer freed: glibc raises its mmap threshold
before = mallinfo2().hblks
buffer = np.ones(4 << 18, np.float32)  # a 4 MiB one, as a training step allocates
print(json.dumps({"released": released, "reuse": reuse, "mapped": mallinfo2().hblks - before}))
"""


def _mapped(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _MAPPED, mode], capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    return json.loads(out.stdout)


def test_a_trainer_process_maps_its_big_buffers_so_freeing_returns_them() -> None:
    """Without it, glibc serves a 4 MiB buffer from its heap once an 8 MiB one was freed,
    and keeps it there when it is freed; mapped, it goes back to the system."""
    plain, released = _mapped("plain"), _mapped("released")
    assert plain["mapped"] == 0, plain  # from the heap
    assert released == {"released": True, "reuse": False, "mapped": 1}  # memory wins
