"""Where the weights live on the server: file or memory storage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nats.js.api import StorageType

from rlax_core.errors import ConfigError, VersionNotFoundError
from rlax_transport_nats import NatsParameterStore, NatsServerProcess
from rlax_transport_nats.testing import client_config

pytestmark = pytest.mark.network


def _params(version: int) -> dict[str, np.ndarray]:
    return {"w": np.full(700_000, version, np.float32), "b": np.arange(10, dtype=np.float32)}


def _storage_of(store: NatsParameterStore, stream: str) -> str:
    async def info() -> str:
        return StorageType((await store.connection.js.stream_info(stream)).config.storage).value

    return store.connection.call(info(), timeout=10)


def test_memory_storage_serves_weights_and_empties_on_a_server_restart(tmp_path: Path) -> None:
    server = NatsServerProcess(store_dir=tmp_path / "js")
    server.start()
    config = client_config(server.url, weight_storage="memory", chunk_mb=1)
    store = NatsParameterStore.open(config)
    try:
        ns = config.namespace
        assert _storage_of(store, f"RLAX_{ns}_PARAM_DATA") == "memory"
        assert _storage_of(store, f"RLAX_{ns}_PARAMS") == "memory"
        store.publish(1, _params(1))
        fetched = store.fetch(1)
        assert np.array_equal(fetched.arrays["w"], _params(1)["w"])

        server.restart()
        # The versions were in the server's memory: gone, and said so, not torn.
        assert store.latest() is None
        with pytest.raises(VersionNotFoundError):
            store.fetch(1)
        # The trainer's next publish serves readers again.
        store.publish(2, _params(2))
        assert store.wait_for_newer(1, timeout=10).version == 2
        assert np.array_equal(store.fetch(2).arrays["w"], _params(2)["w"])
    finally:
        store.close()
        server.stop()


def test_a_namespace_keeps_the_storage_it_was_created_with(
    nats_server: NatsServerProcess,
) -> None:
    on_file = client_config(nats_server.url)
    NatsParameterStore.open(on_file).close()
    in_memory = on_file.model_copy(update={"weight_storage": "memory"})
    with pytest.raises(ConfigError, match=r"file storage, but weight_storage is memory"):
        NatsParameterStore.open(in_memory)
