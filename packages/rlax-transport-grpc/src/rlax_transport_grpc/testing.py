"""A gRPC parameter server in its own process, and contract harnesses on it.

For this package's tests and for any package that needs a gRPC transport under test
(the launchers). The server is started exactly as a deployment starts it:
``rlax serve param-server --transport grpc``. Requires ``rlax-core[testing]``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rlax_core.testing import ParameterStoreHarness, QueueHarness, RestartHarness
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.parameter_store import GrpcParameterStore
from rlax_transport_grpc.queue import GrpcQueue


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServeProcess:
    """``rlax serve param-server --transport grpc`` as a child process.

    Args:
        state_dir: the server's state folder (kept across :meth:`restart`).
        settings: more ``--set`` overrides (``"keep_versions": 3``, ``"token": ...``).
        run_dir: the run directory it reports its load to (``--run-dir``), if any.
    """

    def __init__(self, state_dir: Path, run_dir: Path | None = None, **settings: object) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.state_dir = state_dir
        self.settings = {"address": self.address, "server.state_dir": str(state_dir), **settings}
        self.log = state_dir.parent / f"serve-{self.port}.log"
        self.run_dir = run_dir
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Starts the server; returns when it accepts connections."""
        command = [sys.executable, "-m", "rlax_core.cli", "serve", "param-server"]
        command += ["--transport", "grpc"]
        if self.run_dir is not None:
            command += ["--run-dir", str(self.run_dir)]
        for key, value in self.settings.items():
            command += [
                "--set",
                f"{key}={json.dumps(value) if not isinstance(value, str) else value}",
            ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the server did not listen within {timeout} s")

    def stop(self) -> None:
        """Stops the server with SIGTERM (as a supervisor would)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """Kills the server with SIGKILL (a crash); its state folder stays."""
        self._end(signal.SIGKILL)

    def restart(self) -> None:
        """Kills the server and starts it again on the same port and state folder."""
        self.kill()
        self.start()

    def _end(self, signum: int) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signum)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def client_config(self, **settings: object) -> GrpcTransportConfig:
        """A client config for this server on a fresh namespace, short time limits."""
        defaults: dict[str, object] = {
            "address": self.address,
            "namespace": f"t{uuid.uuid4().hex[:10]}",
            "connect_timeout_s": 5.0,
            "reconnect_timeout_s": 10.0,
        }
        for key in ("token", "chunk_mb"):
            if key in self.settings:
                defaults[key] = self.settings[key]
        return GrpcTransportConfig(**{**defaults, **settings})


class GrpcStoreHarness(ParameterStoreHarness):
    """Stores on one namespace of a running server (started with keep_versions=3)."""

    keep_last = 3

    def __init__(self, server: ServeProcess, **settings: object) -> None:
        self.server = server
        self.config = server.client_config(**settings)

    def open(self) -> GrpcParameterStore:
        return GrpcParameterStore.open(self.config)

    def corrupt(self, version: int, name: str) -> None:
        """Flips one byte of the tensor's file, which the server serves from memory maps."""
        folder = self.server.state_dir / self.config.namespace / f"v{version}"
        manifest = json.loads((folder / "manifest.json").read_text())
        index = [t["name"] for t in manifest["tensors"]].index(name)
        with (folder / f"{index}.bin").open("r+b") as data:
            size = data.seek(0, 2)
            data.seek(size // 2)
            byte = data.read(1)[0]
            data.seek(size // 2)
            data.write(bytes([byte ^ 0xFF]))


class GrpcQueueHarness(QueueHarness):
    """Queues on one namespace of a running server."""

    lease_s = 0.3

    def __init__(self, server: ServeProcess, **settings: object) -> None:
        self.config = server.client_config(**settings)

    def open(self, name: str = "items", *, max_deliveries: int | None = None) -> GrpcQueue:
        return GrpcQueue.open(self.config, name, max_deliveries=max_deliveries)


class GrpcRestartHarness(RestartHarness):
    """A parameter server of its own, killed with SIGKILL and started on the same state.

    The server journals its queues, so a lease live at the kill is ready again at once.

    Args:
        state_dir: the server's state folder (kept across the restart).
    """

    keep_last = 3
    restores_leases = True

    def __init__(self, state_dir: Path) -> None:
        self.server = ServeProcess(state_dir, keep_versions=self.keep_last, chunk_mb=1)
        self.server.start()
        self.config = self.server.client_config(reconnect_timeout_s=30.0)

    def open_store(self) -> GrpcParameterStore:
        return GrpcParameterStore.open(self.config)

    def open_queue(self, name: str) -> GrpcQueue:
        return GrpcQueue.open(self.config, name)

    def restart(self) -> None:
        self.server.restart()  # SIGKILL, then a new process on the same state folder

    def stop(self) -> None:
        """Stops the server."""
        self.server.stop()
