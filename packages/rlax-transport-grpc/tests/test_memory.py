"""A fetch into destination buffers holds nothing (bulk) or two chunks (stream) besides them."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from rlax_transport_grpc import GrpcParameterStore
from rlax_transport_grpc.testing import ServeProcess

pytestmark = pytest.mark.network


@pytest.mark.parametrize("route", ["bulk", "stream"])
def test_fetch_into_buffers_holds_little_besides_them(grpc_server: ServeProcess, route) -> None:
    chunk = 1 << 20  # the session server's chunk_mb
    params = {f"w{i}": np.full(8 << 20, i, np.uint8) for i in range(4)}  # 32 MiB
    out = {name: np.empty_like(array) for name, array in params.items()}
    config = grpc_server.client_config(bulk_fetch=route == "bulk")
    with GrpcParameterStore.open(config) as store:
        store.publish(1, params)
        store.fetch(1, out=out)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            store.fetch(1, out=out)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        assert store.fetch_route == route
    if route == "bulk":
        # Received straight into the buffers: nothing chunk-sized is held.
        assert peak <= 256 << 10, f"{peak / chunk:.2f} chunks besides the buffers"
    else:
        # gRPC's Python receive path builds each message in a bytearray and copies it
        # into bytes, so the chunk being received exists twice for a moment; nothing else
        # is held (the previous chunk is released before the next is read: the fetch
        # stream is read on the caller's thread, see channel.py).
        assert peak <= 2 * chunk + (256 << 10), f"{peak / chunk:.1f} chunks besides the buffers"
    for name, array in params.items():
        np.testing.assert_array_equal(out[name], array)
