"""``rlax serve param-server --transport nats`` starts a nats-server, or uses a running one."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlax_core.transport.credentials import generate_run_credentials
from rlax_transport_nats import NatsServerProcess, NatsTransport, NatsTransportConfig
from rlax_transport_nats.config import NatsServerSettings
from rlax_transport_nats.serve import NatsTransportServer
from rlax_transport_nats.server import free_port
from rlax_transport_nats.testing import client_config

pytestmark = pytest.mark.network


def _serve(*settings: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "rlax_core.cli", "serve", "param-server"]
    command += ["--transport", "nats"]
    for setting in settings:
        command += ["--set", setting]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_serving(process: subprocess.Popen) -> str:
    line = process.stdout.readline()
    assert line.startswith("serving param-server at"), (line, process.stderr.read())
    return line.split(" at ")[1].strip()


def test_serve_starts_a_server_that_clients_use(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    process = _serve(f"servers=[{url}]", "token=tok", f"server.store_dir={tmp_path / 'js'}")
    try:
        assert _wait_serving(process) == url
        transport = NatsTransport(client_config(url, token="tok", namespace="rlax"))
        store = transport.parameter_store()
        store.publish(1, {"w": np.ones(4, np.float32)})
        assert store.versions() == [1]
        transport.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    # The server went with it.
    time.sleep(0.2)
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1)


def test_serve_uses_a_server_that_already_runs(tmp_path: Path) -> None:
    with NatsServerProcess(store_dir=tmp_path / "js") as running:
        process = _serve(f"servers=[{running.url}]")
        try:
            assert _wait_serving(process) == running.url
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(20) == 0
        assert running.running()  # not ours to stop


def test_serve_refuses_an_open_server_on_every_interface() -> None:
    process = _serve(f"servers=[nats://0.0.0.0:{free_port()}]")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    assert "--insecure" in stderr and "authentication and TLS" in stderr


def test_serve_with_role_credentials_and_tls_on_every_interface(tmp_path: Path) -> None:
    made = generate_run_credentials(tmp_path / "credentials", ["localhost", "127.0.0.1"])
    server = made.server
    port = free_port()
    process = _serve(
        f"servers=[tls://0.0.0.0:{port}]",
        f"tls_ca_file={server / 'ca.pem'}",
        f"server.credentials_dir={server / 'credentials'}",
        f"server.tls_cert_file={server / 'server.pem'}",
        f"server.tls_key_file={server / 'server-key.pem'}",
        f"server.store_dir={tmp_path / 'js'}",
    )
    try:
        _wait_serving(process)
        config = client_config(
            f"tls://127.0.0.1:{port}",
            namespace="rlax",
            tls_ca_file=made.roles["worker"] / "ca.pem",
            credentials_file=made.roles["worker"] / "credential",
        )
        worker = NatsTransport(config)
        try:  # the streams and queues are there before the trainer comes
            assert worker.parameter_store().latest() is None
            assert worker.queue("prompts").get(5.0, timeout=0.1) is None
        finally:
            worker.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0


def test_security_reports_authentication_and_tls(tmp_path: Path) -> None:
    made = generate_run_credentials(tmp_path / "credentials", ["127.0.0.1"])
    open_server = NatsTransportServer(NatsTransportConfig(servers=["nats://0.0.0.0:4999"]))
    assert not open_server.security().safe
    closed = NatsTransportConfig(
        servers=["tls://0.0.0.0:4999"],
        server=NatsServerSettings(
            credentials_dir=made.server / "credentials",
            tls_cert_file=made.server / "server.pem",
            tls_key_file=made.server / "server-key.pem",
        ),
    )
    security = NatsTransportServer(closed).security()
    assert (security.host, security.authenticated, security.encrypted) == ("0.0.0.0", True, True)
    assert security.safe
    token_only = NatsTransportConfig(servers=["nats://0.0.0.0:4999"], token="t")
    assert not NatsTransportServer(token_only).security().safe  # no TLS
