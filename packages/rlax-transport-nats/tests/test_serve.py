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

from rlax_transport_nats import NatsServerProcess, NatsTransport
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
