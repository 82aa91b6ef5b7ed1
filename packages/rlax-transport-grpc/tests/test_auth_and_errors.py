"""gRPC TLS and bearer tokens, and clear errors within bounded time, on real servers."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from rlax_core.errors import TransportAuthError, TransportUnreachableError, VersionNotFoundError
from rlax_core.testing.tls import make_test_certificates
from rlax_transport_grpc import GrpcParameterStore, GrpcQueue
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.testing import ServeProcess, free_port

pytestmark = pytest.mark.network


def _params(version: int) -> dict[str, np.ndarray]:
    return {"w": np.full(1000, version, np.float32)}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("tls")
    certs = make_test_certificates(folder / "certs")
    server = ServeProcess(
        folder / "state",
        token="right-token",
        **{
            "server.tls_cert_file": str(certs.server_cert_file),
            "server.tls_key_file": str(certs.server_key_file),
        },
    )
    server.start()
    yield server, certs
    server.stop()


def test_a_wrong_or_missing_token_is_refused_and_the_store_is_unchanged(tls_server) -> None:
    server, certs = tls_server
    good = server.client_config(tls_ca_file=certs.ca_file)
    with GrpcParameterStore.open(good) as store:
        store.publish(1, _params(1))
        for token in ("wrong-token", None):
            config = good.model_copy(update={"token": token})
            with pytest.raises(TransportAuthError, match="token"):
                GrpcParameterStore.open(config)
        # A publish that gets past connecting (the token changed meanwhile) is refused too.
        intruder = GrpcParameterStore.open(good)
        intruder._ch.metadata = (("rlax-namespace", good.namespace), ("authorization", "Bearer x"))
        with pytest.raises(TransportAuthError):
            intruder.publish(2, _params(2))
        intruder.close()
        assert store.versions() == [1]
        assert store.latest().version == 1


def test_queue_calls_need_the_token_too(tls_server) -> None:
    server, certs = tls_server
    config = server.client_config(tls_ca_file=certs.ca_file, token="wrong-token")
    with pytest.raises(TransportAuthError):
        GrpcQueue.open(config, "q")


def test_tls_against_an_unrelated_ca_is_refused(tls_server) -> None:
    server, certs = tls_server
    config = server.client_config(tls_ca_file=certs.other_ca_file, connect_timeout_s=2.0)
    start = time.monotonic()
    with pytest.raises(TransportAuthError, match="tls_ca_file"):
        GrpcParameterStore.open(config)
    assert time.monotonic() - start < 10


def test_plaintext_to_a_tls_server_fails_clearly(tls_server) -> None:
    server, _ = tls_server
    with pytest.raises((TransportAuthError, TransportUnreachableError), match=server.address):
        GrpcParameterStore.open(server.client_config(connect_timeout_s=1.5))


def test_an_unreachable_server_fails_fast_and_names_the_address(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "state")  # never started
    start = time.monotonic()
    with pytest.raises(TransportUnreachableError, match=server.address) as info:
        GrpcParameterStore.open(server.client_config(connect_timeout_s=1.0))
    assert time.monotonic() - start < 8
    assert "rlax serve param-server" in str(info.value)


def test_a_server_that_dies_mid_transfer_is_an_error_within_the_budget(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "state", chunk_mb=1)
    server.start()
    try:
        store = GrpcParameterStore.open(server.client_config(reconnect_timeout_s=2.0))
        store.publish(1, {"w": np.ones(32 << 20, np.uint8)})
        server.kill()
        start = time.monotonic()
        with pytest.raises(TransportUnreachableError, match=server.address):
            store.fetch(1)
        assert time.monotonic() - start < 15
        store.close()
    finally:
        server.stop()


def test_a_version_truncated_on_disk_is_dropped_at_restart(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "state", chunk_mb=1)
    server.start()
    try:
        config = server.client_config()
        with GrpcParameterStore.open(config) as store:
            store.publish(1, {"w": np.ones(3 << 20, np.uint8)})
            # Behind the server's back, the file loses its tail (a full disk, a bad copy).
            folder = tmp_path / "state" / config.namespace / "v1"
            server.kill()
            with (folder / "0.bin").open("r+b") as data:
                data.truncate(2 << 20)
            server.start()
            with pytest.raises(VersionNotFoundError, match="version 1"):
                store.fetch(1)
            assert "version 1" in server.log.read_text() and "damaged" in server.log.read_text()
    finally:
        server.stop()


def test_a_free_port_is_free() -> None:
    assert free_port() > 0


def test_a_fetch_over_tls_gets_its_bytes_through_the_bulk_port_over_tls(tls_server) -> None:
    server, certs = tls_server
    with GrpcParameterStore.open(server.client_config(tls_ca_file=certs.ca_file)) as store:
        store.publish(7, _params(7))
        fetched = store.fetch(7)
        assert store.fetch_route == "bulk"
        np.testing.assert_array_equal(fetched.arrays["w"], _params(7)["w"])
        # The bulk port speaks TLS only: a plaintext ticket gets no answer.
        reply = store._ch.params.OpenBulkFetch(
            pb.FetchRequest(version=7, names=["w"]), **store._ch.kw(10)
        )
        with socket.create_connection(("127.0.0.1", reply.port), timeout=10) as conn:
            conn.sendall(reply.ticket)
            try:
                answer = conn.recv(1)
            except ConnectionResetError:
                answer = b""
            assert answer in (b"", b"\x15")  # closed, reset, or a TLS alert record
