"""Harnesses that run the core contract suites against a real nats-server.

For this package's tests and for any package that needs a NATS transport under test
(the launchers). Requires ``rlax-core[testing]`` (pytest).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from rlax_core.testing import ParameterStoreHarness, QueueHarness, RestartHarness
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
from rlax_transport_nats.queue import NatsQueue
from rlax_transport_nats.server import NatsServerProcess


def client_config(url: str, **settings: object) -> NatsTransportConfig:
    """A config on a fresh namespace, with short time limits for tests."""
    defaults: dict[str, object] = {
        "servers": [url],
        "namespace": f"t{uuid.uuid4().hex[:10]}",
        "connect_timeout_s": 3.0,
        "reconnect_timeout_s": 10.0,
        # JetStream reserves each stream's limit: a test server holds many namespaces.
        "max_weights_gb": 4.0,
        "max_queue_gb": 0.05,
    }
    return NatsTransportConfig(**{**defaults, **settings})


def delete_namespace(config: NatsTransportConfig) -> None:
    """Deletes every stream of the config's namespace (frees the server's store)."""
    connection = NatsConnection(config)

    async def delete() -> None:
        for stream in await connection.js.streams_info():
            if stream.config.name.startswith(f"RLAX_{config.namespace}_"):
                await connection.js.delete_stream(stream.config.name)

    try:
        connection.call(delete(), timeout=30)
    finally:
        connection.close()


class NatsStoreHarness(ParameterStoreHarness):
    """Stores on one namespace of a running server; 1 MiB chunks, so tensors span many."""

    keep_last = 3

    def __init__(self, url: str, **settings: object) -> None:
        self.config = client_config(url, keep_versions=self.keep_last, chunk_mb=1, **settings)

    def open(self) -> NatsParameterStore:
        return NatsParameterStore.open(self.config)

    def corrupt(self, version: int, name: str) -> None:
        """Replaces the first chunk of a tensor with a copy whose middle byte is flipped.

        Chunks are immutable, so this purges the chunk first, as only a client with the
        trainer's rights (here a lab client) can.
        """
        store = NatsParameterStore.open(self.config)
        try:
            info, _, upload = store.manifest_of(version)
            index = info.names.index(name)
            stream = f"RLAX_{self.config.namespace}_PARAM_DATA"
            subject = f"rlax.{self.config.namespace}.params.data.{version}.{upload}.{index}.0"
            connection = store.connection

            async def tamper() -> None:
                message = await connection.js.get_msg(stream, subject=subject, direct=True)
                data = bytearray(message.data)
                data[len(data) // 2] ^= 0xFF
                await connection.js.purge_stream(stream, subject=subject)
                await connection.js.publish(subject, bytes(data))

            connection.call(tamper(), timeout=30)
        finally:
            store.close()


class NatsQueueHarness(QueueHarness):
    """Queues on one namespace of a running server, with a 1 s lease tick."""

    lease_s = 0.5

    def __init__(self, url: str, **settings: object) -> None:
        self.config = client_config(url, lease_tick_s=1.0, **settings)

    def open(self, name: str = "items", *, max_deliveries: int | None = None) -> NatsQueue:
        return NatsQueue.open(self.config, name, max_deliveries=max_deliveries)


class NatsRestartHarness(RestartHarness):
    """A nats-server of its own on a file store, restarted with SIGTERM and started again.

    Args:
        store_dir: the JetStream store folder (kept across the restart).
    """

    keep_last = 3

    def __init__(self, store_dir: Path) -> None:
        self.server = NatsServerProcess(store_dir=store_dir)
        self.server.start()
        self.config = client_config(
            self.server.url, reconnect_timeout_s=30.0, chunk_mb=1, keep_versions=self.keep_last
        )

    def open_store(self) -> NatsParameterStore:
        return NatsParameterStore.open(self.config)

    def open_queue(self, name: str) -> NatsQueue:
        return NatsQueue.open(self.config, name)

    def restart(self) -> None:
        self.server.restart()

    def stop(self) -> None:
        """Stops the server."""
        self.server.stop()
