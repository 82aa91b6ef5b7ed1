"""The hostile-client suite against a real nats-server with a credential per role and TLS.

The harness starts the server the way ``rlax serve param-server`` does (the roles'
permissions generated from ``server.credentials_dir``, the streams and queues created
as the trainer), and carries out the attacks only NATS can express with raw NATS and
JetStream API calls on a connection holding the attacker's credential.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
import pytest

from rlax_core.errors import (
    RlaxError,
    TransportAuthError,
    TransportError,
    TransportUnreachableError,
)
from rlax_core.kit.transport import Role, SigningSettings
from rlax_core.testing.hostile_contract import HostileClientContract, HostileHarness
from rlax_core.transport.credentials import RunCredentials, generate_run_credentials
from rlax_core.types.lease import Lease
from rlax_transport_nats import NatsTransport, NatsTransportConfig
from rlax_transport_nats.config import NatsServerSettings
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.param_streams import ParamStreams
from rlax_transport_nats.queue import NatsQueue
from rlax_transport_nats.serve import NatsTransportServer
from rlax_transport_nats.server import free_port

pytestmark = pytest.mark.network

NAMESPACE = "hostile"


class NatsHostileHarness(HostileHarness):
    """One run's nats-server (roles, TLS, signing) and raw attacks on it.

    Args:
        folder: where the run's credentials and the JetStream store go.
    """

    max_lease_s = 3600.0

    def __init__(self, folder: Path) -> None:
        self.made = generate_run_credentials(folder / "credentials", ["localhost", "127.0.0.1"])
        server = self.made.server
        self.config = NatsTransportConfig(
            servers=[f"tls://127.0.0.1:{free_port()}"],
            namespace=NAMESPACE,
            connect_timeout_s=3.0,
            reconnect_timeout_s=10.0,
            max_weights_gb=1.0,
            max_queue_items=300,
            max_queue_gb=0.05,
            tls_ca_file=server / "ca.pem",
            server=NatsServerSettings(
                store_dir=folder / "jetstream",
                credentials_dir=server / "credentials",
                tls_cert_file=server / "server.pem",
                tls_key_file=server / "server-key.pem",
                max_lease_s=self.max_lease_s,
            ),
        )
        self.server = NatsTransportServer(self.config)
        self.server.start()
        self._raw: dict[Role, NatsConnection] = {}

    def close(self) -> None:
        """Closes the raw connections and stops the server."""
        for connection in self._raw.values():
            connection.close()
        self.server.stop()

    def client_config(self, role: Role | None, *, signing_key: bool = True) -> NatsTransportConfig:
        """The settings of a client with ``role``'s credential (None: none)."""
        folder = self.made.roles[role or "worker"]
        private = self.made.roles["trainer"] / "signing-key.pem"
        signing = SigningSettings(
            public_key_file=folder / "signing.pub",
            private_key_file=private if role == "trainer" and signing_key else None,
        )
        credential = None if role is None else folder / "credential"
        return self.config.model_copy(update={"credentials_file": credential, "signing": signing})

    def transport(self, role: Role | None, *, signing_key: bool = True) -> NatsTransport:
        return NatsTransport(self.client_config(role, signing_key=signing_key))

    # -- raw attacks --

    def overwrite_version(self, role: Role, version: int) -> None:
        streams = ParamStreams(self._connection(role), self.config)
        trainer = self._connection("trainer")
        manifest = trainer.call(
            trainer.js.get_msg(
                streams.manifest_stream, subject=streams.manifest_subject(version), direct=True
            ),
            timeout=10,
        )
        body = json.loads(manifest.data)
        body["policy"]["metadata"] = {"overwritten": True}
        chunk = streams.chunk_subject(version, body["upload"], 0, 0)
        self._all_refused(
            role,
            f"overwriting version {version}",
            [
                lambda js: js.publish(streams.manifest_subject(version), json.dumps(body).encode()),
                lambda js: js.publish(chunk, b"\0" * 512),
            ],
        )

    def delete_store(self, role: Role) -> None:
        streams = ParamStreams(self._connection(role), self.config)
        self._all_refused(
            role,
            "deleting the store",
            [
                lambda js: js.delete_stream(streams.manifest_stream),
                lambda js: js.purge_stream(streams.manifest_stream),
                lambda js: js.delete_stream(streams.data_stream),
                lambda js: js.delete_msg(streams.manifest_stream, 1),
            ],
        )

    def send_manifest(self, role: Role, manifest: bytes) -> None:
        try:
            version = int(json.loads(manifest)["version"])
        except (ValueError, KeyError, TypeError):
            version = 999_999  # junk at a huge version
        subject = ParamStreams(self._connection(role), self.config).manifest_subject(version)
        body = b'{"policy": ' + manifest + b', "chunk_bytes": 1048576, "upload": "00ff"}'
        self._all_refused(role, "sending a manifest", [lambda js: js.publish(subject, body)])

    def end_lease_of_another(self, role: Role, lease: Lease) -> None:
        connection = self._connection(role)

        async def listen(js: Any) -> None:  # to observe other clients' acks and deliveries
            await connection.nc.subscribe("$JS.ACK.>")
            await connection.nc.subscribe("_INBOX.>")

        attempts = [listen] + [
            (lambda js, answer=answer: connection.nc.publish(lease.token, answer))
            for answer in (b"+TERM", b"+ACK", b"-NAK")
        ]
        self._all_refused(role, "ending another client's lease", attempts)

    @contextlib.contextmanager
    def flood(self, count: int) -> Iterator[list[socket.socket]]:
        port = int(self.config.servers[0].rsplit(":", 1)[1])
        sockets = []
        try:
            for _ in range(count):
                with contextlib.suppress(OSError):
                    sockets.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            yield sockets
        finally:
            for sock in sockets:
                sock.close()

    def fill(self, role: Role) -> None:
        queue = NatsQueue.open(self.client_config(role), "to_verify")
        try:
            for i in range(100_000):
                queue.put(f"fill-{i}", b"\0" * (64 << 10))  # raises once a quota stops it
        finally:
            queue.close()

    def restart(self) -> None:
        assert self.server.process is not None
        self.server.process.restart()

    # -- internals --

    def _connection(self, role: Role) -> NatsConnection:
        if role not in self._raw:
            self._raw[role] = NatsConnection(self.client_config(role))
        return self._raw[role]

    def _all_refused(
        self, role: Role, what: str, attempts: list[Callable[[Any], Awaitable[Any]]]
    ) -> None:
        """Runs each raw attempt; returns if any got through, raises if none did."""
        connection = self._connection(role)
        refusals = []
        for attempt in attempts:
            try:
                connection.call(attempt(connection.js), timeout=15)
                connection.call(connection.check_denied(what), timeout=15)
            except nats.js.errors.APIError as exc:
                refusals.append(f"JetStream: {exc.description}")
            except TransportAuthError as exc:
                refusals.append(str(exc))
            except (nats.errors.TimeoutError, TimeoutError, TransportUnreachableError):
                # A denied request is dropped by the server: no answer, and an error.
                try:
                    connection.call(connection.check_denied(what), timeout=15)
                except TransportAuthError as exc:
                    refusals.append(str(exc))
                else:
                    refusals.append("no answer")
            else:
                return  # this one got through
        raise TransportError(f"{what} with the {role}'s credential: refused ({refusals})")


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[NatsHostileHarness]:
    made = NatsHostileHarness(tmp_path)
    yield made
    made.close()


class TestNatsUnderAttack(HostileClientContract):
    @pytest.fixture
    def hostile_harness(self, harness: NatsHostileHarness) -> NatsHostileHarness:
        return harness


# -- NATS's own: what the server itself refuses, below the client's checks --


def test_a_worker_cannot_subscribe_to_acks_or_other_roles_inboxes(
    harness: NatsHostileHarness,
) -> None:
    connection = harness._connection("worker")
    for subject in ("$JS.ACK.>", "_INBOX.>", "_INBOX.trainer.>", "rlax.hostile.q.rollouts"):
        connection.call(connection.nc.subscribe(subject), timeout=5)
        with pytest.raises(TransportAuthError, match=r"(?i)subscription"):
            connection.call(connection.check_denied(f"subscribing to {subject}"), timeout=5)


@pytest.mark.parametrize("role", ["worker", "verifier"])
def test_the_server_refuses_raw_writes_of_weights_and_prompts(
    role: Role, harness: NatsHostileHarness
) -> None:
    """Below the client's own refusal: raw publishes to the weight, manifest, prompt and
    announcement subjects, and stream creation, are denied by the server."""
    connection = harness._connection(role)
    streams = ParamStreams(connection, harness.config)
    attempts: dict[str, Callable[[Any], Awaitable[Any]]] = {
        "chunk": lambda js: js.publish(streams.chunk_subject(1, "00ff", 0, 0), b"x"),
        "manifest": lambda js: js.publish(streams.manifest_subject(1), b"{}"),
        "prompt": lambda js: js.publish("rlax.hostile.q.prompts", b"x"),
        "announcement": lambda js: connection.nc.publish("rlax.hostile.params.announce.9", b""),
        "stream": lambda js: js.add_stream(name="EVIL", subjects=["evil.>"]),
        "consumer": lambda js: js.delete_consumer("RLAX_hostile_Q_prompts", "workers"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(RlaxError, match="denied it to the"):
            harness._all_refused(role, what, [attempt])


def _mutual_tls_config(made: RunCredentials, tmp_path: Path) -> NatsTransportConfig:
    """A server with the run's credentials that asks every client for a certificate."""
    return NatsTransportConfig(
        servers=[f"tls://127.0.0.1:{free_port()}"],
        namespace=NAMESPACE,
        connect_timeout_s=3.0,
        reconnect_timeout_s=5.0,
        max_weights_gb=1.0,
        max_queue_gb=0.05,
        tls_ca_file=made.server / "ca.pem",
        server=NatsServerSettings(
            store_dir=tmp_path / "jetstream",
            credentials_dir=made.server / "credentials",
            tls_cert_file=made.server / "server.pem",
            tls_key_file=made.server / "server-key.pem",
            verify_clients=True,
        ),
    )


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    made = generate_run_credentials(tmp_path / "credentials", ["127.0.0.1"])
    config = _mutual_tls_config(made, tmp_path)
    server = NatsTransportServer(config)
    server.start()
    try:
        trainer = made.roles["trainer"]
        with_credential = config.model_copy(update={"credentials_file": trainer / "credential"})
        # The server ends the handshake: the client reads a TLS alert, or (as often on
        # loopback) a reset connection, before any credential is looked at.
        with pytest.raises((TransportAuthError, TransportUnreachableError)):
            NatsTransport(with_credential).parameter_store()
        certified = with_credential.model_copy(
            update={
                "tls_cert_file": trainer / "client.pem",
                "tls_key_file": trainer / "client-key.pem",
            }
        )
        transport = NatsTransport(certified)
        try:
            assert transport.parameter_store().latest() is None
        finally:
            transport.close()
    finally:
        server.stop()


def test_under_mutual_tls_the_server_makes_the_streams_before_any_role_starts(
    tmp_path: Path,
) -> None:
    """As the launchers mount it: the server's folder holds a client certificate at the
    config's client paths, so `rlax serve` makes the streams and queues itself and a
    worker that starts before the trainer finds them."""
    made = generate_run_credentials(tmp_path / "credentials", ["rlax-transport"])
    config = _mutual_tls_config(made, tmp_path).model_copy(
        update={
            "tls_cert_file": made.server / "client.pem",
            "tls_key_file": made.server / "client-key.pem",
        }
    )
    server = NatsTransportServer(config)
    server.start()
    try:
        worker = made.roles["worker"]
        as_worker = config.model_copy(
            update={
                "credentials_file": worker / "credential",
                "tls_cert_file": worker / "client.pem",
                "tls_key_file": worker / "client-key.pem",
            }
        )
        transport = NatsTransport(as_worker)
        try:
            assert transport.queue("prompts").get(5.0, 0) is None  # the queue exists
            assert transport.parameter_store().latest() is None
        finally:
            transport.close()
    finally:
        server.stop()
