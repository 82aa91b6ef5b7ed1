"""Hostile input the gRPC wire can carry: refused with a message, and the server serves on."""

from __future__ import annotations

import json
import math
import socket
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from rlax_core.errors import ManifestError
from rlax_transport_grpc import GrpcChannel, GrpcParameterStore, GrpcQueue
from rlax_transport_grpc.limits import QuotaExceededError
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.testing import ServeProcess

pytestmark = pytest.mark.network


@pytest.fixture
def server(tmp_path: Path):
    serving = ServeProcess(
        tmp_path / "state",
        token="lab-token-for-tests",
        **{"server.max_namespaces": 3, "server.max_queues": 4},
    )
    serving.start()
    yield serving
    serving.stop()


@pytest.mark.parametrize("lease_s", [math.nan, math.inf, -1.0, 1e300])
def test_a_lease_that_is_not_finite_and_bounded_is_refused(server, lease_s) -> None:
    config = server.client_config()
    queue = GrpcQueue.open(config, "items")
    with _Closing(GrpcChannel(config)) as channel:
        assert queue.put("a", b"x")
        request = pb.GetRequest(queue="items", lease_s=lease_s, timeout_s=0)
        with pytest.raises(grpc.RpcError) as info:
            channel.queues.Get(request, **channel.kw(10))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_lease_s" in info.value.details()
        short = queue.get(0.3, timeout=5)  # expiry still works in this queue
        again = queue.get(5.0, timeout=5)
        assert again is not None and again.delivery == short.delivery + 1
    queue.close()


class _Closing:
    def __init__(self, channel: GrpcChannel) -> None:
        self.channel = channel

    def __enter__(self) -> GrpcChannel:
        return self.channel

    def __exit__(self, *exc: object) -> None:
        self.channel.close()


def test_a_version_past_the_bound_is_refused_and_the_trainer_goes_on(server) -> None:
    with GrpcParameterStore.open(server.client_config()) as store:
        with pytest.raises(ManifestError, match="version numbers stop"):
            store.publish(2**62, {"w": np.ones(4, np.float32)})
        store.publish(1, {"w": np.ones(4, np.float32)})
        assert store.latest().version == 1


def test_blocking_gets_never_starve_ping(server) -> None:
    with _Closing(GrpcChannel(server.client_config())) as channel:
        channel.queues.OpenQueue(pb.OpenQueueRequest(queue="empty"), **channel.kw(10))
        request = pb.GetRequest(queue="empty", lease_s=10.0, timeout_s=1e9)
        calls = [channel.queues.Get.future(request, **channel.kw(60)) for _ in range(80)]
        try:
            time.sleep(1.0)
            start = time.monotonic()
            info = channel.params.Ping(pb.Empty(), **channel.kw(2))
            assert time.monotonic() - start < 1.0
            assert info.waiting_calls == 32 and info.refused_busy >= 48
            busy = [c for c in calls if c.done()]
            assert busy and busy[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            for call in calls:
                call.cancel()


def test_a_bad_version_folder_is_quarantined_at_restart(server) -> None:
    config = server.client_config()
    with GrpcParameterStore.open(config) as store:
        store.publish(1, {"w": np.ones(4, np.float32)})
        store.publish(2, {"w": np.ones(4, np.float32)})
    server.kill()
    manifest = server.state_dir / config.namespace / "v2" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["tensors"][0]["shape"] = [1_000_000]  # a shape that does not match its byte count
    manifest.write_text(json.dumps(data))
    server.start()
    with GrpcParameterStore.open(config) as store:
        assert store.latest().version == 1
        store.publish(3, {"w": np.full(4, 3.0, np.float32)})
        np.testing.assert_array_equal(store.fetch(3).arrays["w"], np.full(4, 3.0, np.float32))
    assert "quarantine" in server.log.read_text()


def test_a_request_that_does_not_parse_is_refused_without_a_traceback(server) -> None:
    with _Closing(GrpcChannel(server.client_config())) as channel:
        put = channel.channel.unary_unary("/rlax.transport.v1.Queues/Put")
        with pytest.raises(grpc.RpcError) as info:
            put(b"\xff\xff\xff\xff", **channel.kw(10))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        put_name = pb.PutRequest(queue="../../etc", item_id="a", payload=b"x")
        with pytest.raises(grpc.RpcError) as info:
            channel.queues.Put(put_name, **channel.kw(10))
        assert "queue names" in info.value.details()
        channel.params.Ping(pb.Empty(), **channel.kw(5))
    assert "Traceback" not in server.log.read_text()


def test_namespaces_and_queues_have_quotas(server) -> None:
    for index in range(3):
        GrpcChannel(server.client_config(namespace=f"space{index}")).close()
    with pytest.raises(QuotaExceededError, match="max_namespaces"):
        GrpcChannel(server.client_config(namespace="one-too-many"))
    config = server.client_config(namespace="space0")
    for name in ("a", "b", "c", "d"):
        GrpcQueue.open(config, name).close()
    with pytest.raises(QuotaExceededError, match="max_queues"):
        GrpcQueue.open(config, "e")


def test_the_bulk_port_wants_a_credential(server) -> None:
    with GrpcParameterStore.open(server.client_config()) as store:
        store.publish(1, {"w": np.arange(8, dtype=np.float32)})
        request = pb.FetchRequest(version=1, names=["w"])
        for credential, status in (
            (b"", b"\x00"),
            (b"wrong", b"\x00"),
            (b"lab-token-for-tests", b"\x01"),
        ):
            reply = store._ch.params.OpenBulkFetch(request, **store._ch.kw(10))
            with socket.create_connection(("127.0.0.1", reply.port), timeout=10) as conn:
                conn.sendall(len(credential).to_bytes(2, "big") + credential + reply.ticket)
                assert conn.recv(1) == status


def test_the_server_counts_its_load_where_rlax_status_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Connections, waiting calls and refusals, written by `rlax serve --run-dir` every
    few seconds to status/transport.json, and shown by `rlax status`."""
    from rlax_core.cli.main import main

    run_dir = tmp_path / "run"
    serving = ServeProcess(tmp_path / "state", run_dir=run_dir, token="lab-token-for-tests")
    serving.start()
    try:
        wrong = serving.client_config(token="not-the-token", connect_timeout_s=2.0)
        with pytest.raises(Exception):  # noqa: B017, PT011 (refused: any error)
            GrpcParameterStore.open(wrong)
        status = run_dir / "status" / "transport.json"
        deadline = time.monotonic() + 30
        load: dict = {}
        while time.monotonic() < deadline and not load.get("refused_credentials"):
            time.sleep(0.5)
            if status.exists():
                load = json.loads(status.read_text()).get("load", {})
        assert load.get("refused_credentials", 0) >= 1
        assert {"waiting_calls", "fetch_streams", "bulk_connections"} <= set(load)
        assert main(["status", str(run_dir)]) == 0
        out = capsys.readouterr().out
        assert "transport" in out and "refused credentials" in out
    finally:
        serving.stop()
