"""A fetch into destination buffers holds two chunks at most besides them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from rlax_transport_grpc import GrpcParameterStore
from rlax_transport_grpc.testing import ServeProcess

pytestmark = pytest.mark.network


def test_fetch_into_buffers_holds_at_most_two_chunks(grpc_server: ServeProcess) -> None:
    chunk = 1 << 20  # the session server's chunk_mb
    params = {f"w{i}": np.full(8 << 20, i, np.uint8) for i in range(4)}  # 32 MiB
    out = {name: np.empty_like(array) for name, array in params.items()}
    with GrpcParameterStore.open(grpc_server.client_config()) as store:
        store.publish(1, params)
        store.fetch(1, out=out)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            store.fetch(1, out=out)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    # gRPC's Python receive path builds each message in a bytearray and copies it into
    # bytes, so the chunk being received exists twice for a moment; nothing else is held
    # (the previous chunk is released before the next is read: the fetch stream is read
    # on the caller's thread, see channel.py).
    assert peak <= 2 * chunk + (256 << 10), f"{peak / chunk:.1f} chunks besides the buffers"
    for name, array in params.items():
        np.testing.assert_array_equal(out[name], array)
