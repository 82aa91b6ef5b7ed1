"""The bulk port: tickets are one-time and unforgeable, and the stream remains."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import numpy as np
import pytest

from rlax_transport_grpc import GrpcParameterStore
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.testing import ServeProcess

pytestmark = pytest.mark.network


def _status_for(port: int, ticket: bytes, credential: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(len(credential).to_bytes(2, "big") + credential + ticket)
        return conn.recv(1)


def test_a_ticket_works_once_and_a_forged_one_never(grpc_server: ServeProcess) -> None:
    with GrpcParameterStore.open(grpc_server.client_config()) as store:
        store.publish(1, {"w": np.arange(1000, dtype=np.float32)})
        request = pb.FetchRequest(version=1, names=["w"])
        reply = store._ch.params.OpenBulkFetch(request, **store._ch.kw(10))
        assert reply.port > 0 and len(reply.ticket) == 16
        assert _status_for(reply.port, secrets.token_bytes(16)) == b"\x00"
        assert _status_for(reply.port, reply.ticket) == b"\x01"
        assert _status_for(reply.port, reply.ticket) == b"\x00"  # used up
        fetched = store.fetch(1)
        assert store.fetch_route == "bulk"
        np.testing.assert_array_equal(fetched.arrays["w"], np.arange(1000, dtype=np.float32))


def test_a_server_without_a_bulk_port_streams(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "state", **{"server.bulk_port": None})
    server.start()
    try:
        with GrpcParameterStore.open(server.client_config()) as store:
            store.publish(1, {"w": np.arange(1000, dtype=np.int64)})
            fetched = store.fetch(1)
            assert store.fetch_route == "stream"
            np.testing.assert_array_equal(fetched.arrays["w"], np.arange(1000))
    finally:
        server.stop()
