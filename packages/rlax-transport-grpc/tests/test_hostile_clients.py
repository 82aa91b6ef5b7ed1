"""The hostile-client suite against a real gRPC parameter server with per-role credentials.

The server runs as a deployment runs it: the run's credentials from
``generate_run_credentials`` (a credential per role, mutual TLS with the run's CA, the
trainer signing every version), and small quotas so that filling one is quick.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlax_core.errors import TransportAuthError
from rlax_core.kit.transport import SigningSettings, prepare_version, version_signer
from rlax_core.testing.hostile_contract import HostileClientContract, HostileHarness
from rlax_core.transport.credentials import Role, generate_run_credentials
from rlax_core.types.lease import Lease
from rlax_transport_grpc import GrpcChannel, GrpcTransport, GrpcTransportConfig, wire
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.testing import ServeProcess, free_port

pytestmark = pytest.mark.network

MAX_LEASE_S = 3600.0
MAX_QUEUE_ITEMS = 100


class GrpcHostileHarness(HostileHarness):
    """A gRPC parameter server of one run, with its clients by role.

    Args:
        folder: holds the run's credentials and the server's state.
    """

    max_lease_s = MAX_LEASE_S

    def __init__(self, folder: Path) -> None:
        self.credentials = generate_run_credentials(folder / "credentials", ["127.0.0.1"])
        server = self.credentials.server
        self.bulk_port = free_port()
        self.server = ServeProcess(
            folder / "state",
            keep_versions=3,
            chunk_mb=1,
            tls_ca_file=str(server / "ca.pem"),
            **{
                "server.credentials_dir": str(server / "credentials"),
                "server.tls_cert_file": str(server / "server.pem"),
                "server.tls_key_file": str(server / "server-key.pem"),
                "server.verify_clients": True,
                "server.bulk_port": self.bulk_port,
                "server.max_lease_s": MAX_LEASE_S,
                "server.max_queue_items": MAX_QUEUE_ITEMS,
            },
        )
        self.server.start()
        self.namespace = "hostile"
        self._made: list[Any] = []
        # A run's trainer makes its namespace with its first call.
        self.channel("trainer").close()

    def config(self, role: Role | None, *, signing_key: bool = True) -> GrpcTransportConfig:
        """A client config with ``role``'s credential, certificate and signing keys."""
        ca = self.credentials.server / "ca.pem"
        settings: dict[str, Any] = {"namespace": self.namespace, "tls_ca_file": ca}
        if role is not None:
            folder = self.credentials.roles[role]
            settings |= {
                "credentials_file": folder / "credential",
                "tls_cert_file": folder / "client.pem",
                "tls_key_file": folder / "client-key.pem",
            }
            if role != "trainer" or signing_key:
                private = folder / "signing-key.pem" if role == "trainer" else None
                settings["signing"] = SigningSettings(
                    public_key_file=folder / "signing.pub", private_key_file=private
                )
        return self.server.client_config(**settings)

    def channel(self, role: Role | None) -> GrpcChannel:
        """A raw channel with ``role``'s credential."""
        return GrpcChannel(self.config(role))

    def transport(self, role: Role | None, *, signing_key: bool = True) -> GrpcTransport:
        return GrpcTransport(self.config(role, signing_key=signing_key))

    def overwrite_version(self, role: Role, version: int) -> None:
        signer = version_signer(self.config("trainer").signing) if role == "trainer" else None
        other = {"embed": np.full((16, 8), -7.0, np.float32), "norm": np.zeros(8, np.float32)}
        prepared = prepare_version(version, other, signer=signer)
        with contextlib.closing(self.channel(role)) as channel:
            _publish_raw(channel, prepared.info.to_bytes(), list(prepared.arrays.values()))

    def delete_store(self, role: Role) -> None:
        # The wire deletes versions only by eviction: publishing keep_versions newer ones.
        with contextlib.closing(self.channel(role)) as channel:
            newest = max(channel.params.ListVersions(pb.Empty(), **channel.kw(10)).versions)
            for version in range(newest + 1, newest + 4):
                prepared = prepare_version(version, {"w": np.zeros(4, np.float32)})
                _publish_raw(channel, prepared.info.to_bytes(), list(prepared.arrays.values()))

    def send_manifest(self, role: Role, manifest: bytes) -> None:
        with contextlib.closing(self.channel(role)) as channel:
            _publish_raw(channel, manifest, [])

    def end_lease_of_another(self, role: Role, lease: Lease) -> None:
        ref = pb.LeaseRef(queue=lease.queue, item_id=lease.item_id, token=lease.token)
        with contextlib.closing(self.channel(role)) as channel:
            for method in (channel.queues.Ack, channel.queues.Nack):
                channel.call("ending another's lease", lambda t, m=method: m(ref, **channel.kw(t)))

    @contextlib.contextmanager
    def flood(self, count: int) -> Iterator[None]:
        sockets: list[socket.socket] = []
        port, bulk_port = self.server.port, self.bulk_port
        verifier = self.channel("verifier")
        calls: list[Any] = []
        try:
            for target in (port, bulk_port):  # idle connections, never authenticated
                for _ in range(count):
                    sockets.append(socket.create_connection(("127.0.0.1", target), timeout=10))
            request = pb.GetRequest(queue="to_verify", lease_s=60.0, timeout_s=1e9)
            for _ in range(count):  # waits that would hold a thread each
                calls.append(verifier.queues.Get.future(request, **verifier.kw(None)))
            yield
        finally:
            for call in calls:
                call.cancel()
            verifier.close()
            for conn in sockets:
                conn.close()

    def fill(self, role: Role) -> None:
        with contextlib.closing(self.channel(role)) as channel:
            for index in range(MAX_QUEUE_ITEMS * 10):
                request = pb.PutRequest(
                    queue="to_verify", item_id=f"fill-{index}", payload=b"x" * 1024
                )
                channel.call("filling", lambda t, r=request: channel.queues.Put(r, **channel.kw(t)))

    def restart(self) -> None:
        self.server.restart()

    def close(self) -> None:
        """Stops the server."""
        self.server.stop()


def _publish_raw(channel: GrpcChannel, manifest: bytes, arrays: list[np.ndarray]) -> None:
    """Streams a manifest frame and the arrays' bytes, as the wire allows any client to."""

    def frames() -> Iterator[bytes]:
        yield wire.encode_manifest_frame(manifest)
        for index, array in enumerate(arrays):
            yield wire.encode_publish_chunk(index, 0, memoryview(array.reshape(-1).view(np.uint8)))

    channel.call("a raw publish", lambda t: channel.publish_frames(frames(), **channel.kw(t)))


class TestGrpcUnderAttack(HostileClientContract):
    @pytest.fixture
    def hostile_harness(self, tmp_path: Path) -> Iterator[GrpcHostileHarness]:
        harness = GrpcHostileHarness(tmp_path)
        yield harness
        harness.close()


def test_the_flood_leaves_threads_bounded(tmp_path: Path) -> None:
    """400 idle bulk connections and 200 waiting gets hold a bounded number of threads."""
    harness = GrpcHostileHarness(tmp_path)
    try:
        pid = harness.server.process.pid
        before = _threads(pid)
        with harness.flood(200):
            threading.Event().wait(1.0)
            during = _threads(pid)
            with contextlib.closing(harness.channel("worker")) as worker:
                info = worker.params.Ping(pb.Empty(), **worker.kw(5))
        assert during - before <= 64 + 16 + 4, (before, during)
        assert info.bulk_connections <= 16 and info.refused_bulk > 0
        assert info.waiting_calls <= 32 and info.refused_busy > 0
    finally:
        harness.close()


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_a_worker_certificate_cannot_carry_the_trainers_credential(tmp_path: Path) -> None:
    harness = GrpcHostileHarness(tmp_path)
    try:
        config = harness.config("worker").model_copy(
            update={"credentials_file": harness.credentials.roles["trainer"] / "credential"}
        )
        with pytest.raises(TransportAuthError, match="certificate"):
            GrpcChannel(config)
    finally:
        harness.close()
