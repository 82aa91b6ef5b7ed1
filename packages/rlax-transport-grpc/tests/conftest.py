"""One gRPC parameter server process for the session; tests isolate by namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlax_transport_grpc.testing import ServeProcess


@pytest.fixture(scope="session")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(tmp_path_factory.mktemp("grpc") / "state", keep_versions=3, chunk_mb=1)
    server.start()
    yield server
    server.stop()
