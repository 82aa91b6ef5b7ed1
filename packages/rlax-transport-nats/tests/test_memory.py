"""A fetch into destination buffers holds (much) less than one chunk besides them."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from rlax_transport_nats import NatsParameterStore, NatsServerProcess
from rlax_transport_nats.testing import client_config, delete_namespace

pytestmark = pytest.mark.network


@pytest.fixture
def store(nats_server: NatsServerProcess) -> Iterator[NatsParameterStore]:
    config = client_config(nats_server.url, chunk_mb=4)
    with NatsParameterStore.open(config) as store:
        yield store
    delete_namespace(config)


def test_fetch_into_buffers_allocates_less_than_a_chunk(store: NatsParameterStore) -> None:
    params = {f"w{i}": np.full(8 << 20, i, np.uint8) for i in range(4)}  # 32 MiB
    out = {name: np.empty_like(array) for name, array in params.items()}
    store.publish(1, params)
    store.fetch(1, out=out)  # warm: connections and pools exist
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store.fetch(1, out=out)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"a fetch allocated {peak / 2**20:.1f} MiB besides the buffers"
    for name, array in params.items():
        np.testing.assert_array_equal(out[name], array)
