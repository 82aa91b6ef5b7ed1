"""A real nats-server for the tests (one per session; tests isolate by namespace)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlax_transport_nats import NatsServerProcess


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    server = NatsServerProcess(store_dir=tmp_path_factory.mktemp("jetstream"))
    server.start()
    yield server
    server.stop()
