"""Weight chunks over the NATS protocol on a plain blocking socket, without copies.

nats-py reads into a growing buffer and slices every message out of it, three copies
of each byte before the caller sees it, on one event loop per connection. For
control traffic that is fine; for gigabytes of weights it is the bottleneck. This
module speaks the (small, documented) NATS client protocol itself for the two bulk
operations only:

* publishing a chunk: ``PUB subject inbox size`` followed by the tensor's own bytes,
  sent straight from the array (``sendall`` of a memoryview), acks read pipelined;
* fetching a chunk: a JetStream direct get (``$JS.API.DIRECT.GET.<stream>.<subject>``)
  whose reply payload is received straight into the destination array
  (``recv_into``), so a fetch holds no chunk in memory beyond the destinations.

The connection authenticates like nats-py (token, user/password, nkey signature of the
server's nonce) and upgrades to TLS when the server or the config asks for it. It is
used by one thread at a time (the store keeps a pool); blocking calls release the GIL,
so concurrent readers in one process proceed in parallel.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import ssl
from collections import deque
from collections.abc import Callable
from urllib.parse import urlparse

import numpy as np

from rlax_core.errors import TransportAuthError, TransportError, TransportUnreachableError
from rlax_transport_nats.auth import client_auth
from rlax_transport_nats.config import NatsTransportConfig

_CRLF = b"\r\n"
_DENIED = "permissions violation"
# JetStream refuses a second message on a subject of a stream that keeps one per subject
# and discards new ones (the weight chunks): a chunk re-sent after a reconnect.
_ALREADY_STORED = "maximum messages per subject exceeded"


class ChunkNotFoundError(TransportError):
    """A direct get found no message on the subject (a version evicted meanwhile)."""


class BulkUnavailableError(TransportError):
    """The connection broke or JetStream did not answer; the call may be retried."""


class BulkConnection:
    """One raw NATS connection for chunk transfers (see the module docstring).

    Args:
        config: the transport settings (servers, credentials, TLS, time limits).

    Raises:
        TransportAuthError: the server refused the credentials, or TLS failed.
        TransportUnreachableError: no server could be reached.
    """

    def __init__(self, config: NatsTransportConfig) -> None:
        self._config = config
        self._auth = client_auth(config)
        self._inbox = f"{self._auth.inbox_prefix}.bulk{secrets.token_hex(8)}"
        self._buffer = bytearray()
        self._sequence = 0
        self.max_payload = 0
        errors = []
        for url in config.servers:
            try:
                self._sock = self._connect(url)
                self.url = url
                return
            except (TransportAuthError, TransportUnreachableError):
                raise
            except (OSError, ValueError) as exc:
                errors.append(f"{url}: {exc}")
        raise TransportUnreachableError(
            f"cannot connect to NATS at {config.address} ({'; '.join(errors)}); check that "
            "nats-server runs there"
        )

    def close(self) -> None:
        """Closes the socket."""
        with contextlib.suppress(OSError):
            self._sock.close()

    # -- bulk operations --

    def fetch_many(
        self,
        stream: str,
        requests: list[tuple[str, memoryview]],
        window: int = 4,
        on_received: Callable[[int], None] | None = None,
    ) -> list[int]:
        """Reads the last message of each subject into its destination, pipelined.

        Up to ``window`` direct gets are in flight; each reply is received straight into
        its own destination, whatever order replies come in. ``on_received(i)`` is
        called as soon as request ``i``'s bytes have landed (while they are still in
        cache).

        Returns:
            Each payload's size, in request order (a size differing from the
            destination's tells the caller the chunk is damaged; extra bytes are dropped).

        Raises:
            ChunkNotFoundError: a subject has no message.
            BulkUnavailableError: the connection broke, or JetStream did not answer.
        """
        sizes = [0] * len(requests)
        waiting: dict[str, int] = {}
        sent = 0
        while sent < len(requests) or waiting:
            while sent < len(requests) and len(waiting) < window:
                reply = self._next_inbox()
                waiting[reply] = sent
                subject = requests[sent][0]
                self._send(f"PUB $JS.API.DIRECT.GET.{stream}.{subject} {reply} 0\r\n\r\n".encode())
                sent += 1
            kind, args = self._read_control()
            if kind == "-ERR":
                raise _refusal(" ".join(args), f"direct get from {stream}")
            if kind == "MSG":  # the ack of a publish we gave up on earlier
                self._discard(int(args[-1]) + 2)
                continue
            if kind != "HMSG":
                continue
            inbox, header_len, total = args[0], int(args[-2]), int(args[-1])
            headers = self._read_exact(header_len)
            size = total - header_len
            index = waiting.pop(inbox, None)
            if index is None:
                self._discard(size + 2)
                continue
            subject, destination = requests[index]
            status = headers.split(_CRLF, 1)[0]
            if size == 0 and b" 404" in status:
                self._discard(2)
                raise ChunkNotFoundError(f"no message on {subject}")
            if size == 0 and status.strip() != b"NATS/1.0":
                self._discard(2)
                text = status.decode(errors="replace")
                raise BulkUnavailableError(f"direct get of {subject}: {text}")
            fits = min(size, len(destination))
            self._read_into(destination[:fits])
            self._discard(size - fits + 2)
            sizes[index] = size
            if on_received is not None:
                on_received(index)
        return sizes

    def publish(self, subjects_and_payloads: list[tuple[str, memoryview]], window: int = 4) -> None:
        """Publishes chunks to JetStream, ``window`` in flight, and checks every ack.

        Raises:
            BulkUnavailableError: the connection broke or an ack did not come.
            TransportError: JetStream refused a chunk.
        """
        pending: deque[str] = deque()
        for subject, payload in subjects_and_payloads:
            reply = self._next_inbox()
            self._send(f"PUB {subject} {reply} {len(payload)}\r\n".encode(), payload, _CRLF)
            pending.append(reply)
            if len(pending) >= window:
                self._read_ack(pending.popleft())
        while pending:
            self._read_ack(pending.popleft())

    # -- protocol --

    def _connect(self, url: str) -> socket.socket:
        parsed = urlparse(url if "://" in url else f"nats://{url}")
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 4222
        timeout = self._config.connect_timeout_s
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise TransportUnreachableError(
                f"cannot connect to NATS at {url} ({exc}); check that nats-server runs there"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        kind, args = self._read_control()
        if kind != "INFO":
            raise TransportUnreachableError(f"{url} does not speak NATS (sent {kind!r})")
        info = json.loads(args[0])
        self.max_payload = int(info.get("max_payload", 1 << 20))
        wants_tls = parsed.scheme == "tls" or self._config.tls_ca_file is not None
        if info.get("tls_required") or wants_tls:
            sock = self._sock = self._wrap_tls(sock, host, url)
        options = {
            "verbose": False,
            "pedantic": False,
            "lang": "python-rlax-bulk",
            "version": "1",
            "protocol": 1,
            "headers": True,
            "no_responders": True,
            "name": "rlax-bulk",
        }
        options.update(self._credentials(info))
        self._send(f"CONNECT {json.dumps(options)}\r\nPING\r\n".encode())
        while True:
            kind, args = self._read_control()
            if kind == "PONG":
                break
            if kind == "-ERR":
                text = " ".join(args)
                error = TransportAuthError if "uthorization" in text else TransportError
                raise error(f"NATS at {url} refused the connection: {text}")
        self._send(f"SUB {self._inbox}.* 1\r\n".encode())
        sock.settimeout(min(30.0, self._config.reconnect_timeout_s))
        return sock

    def _wrap_tls(self, sock: socket.socket, host: str, url: str) -> socket.socket:
        ca = self._config.tls_ca_file
        try:
            context = ssl.create_default_context(cafile=str(ca) if ca else None)
            if self._config.tls_cert_file is not None:
                context.load_cert_chain(
                    str(self._config.tls_cert_file), str(self._config.tls_key_file)
                )
            return context.wrap_socket(sock, server_hostname=host)
        except (ssl.SSLError, OSError) as exc:
            raise TransportAuthError(
                f"TLS with NATS at {url} failed ({exc}); check tls_ca_file"
            ) from None

    def _credentials(self, info: dict) -> dict:
        auth = self._auth
        if auth.token is not None:
            return {"auth_token": auth.token}
        if auth.user is not None:
            return {"user": auth.user, "pass": auth.password}
        if auth.nkey_seed_file is not None:
            import nkeys

            pair = nkeys.from_seed(bytearray(auth.nkey_seed_file.read_bytes().strip()))
            signed = base64.b64encode(pair.sign(info.get("nonce", "").encode())).decode()
            return {"nkey": pair.public_key.decode(), "sig": signed}
        return {}

    def _next_inbox(self) -> str:
        self._sequence += 1
        return f"{self._inbox}.{self._sequence}"

    def _send(self, *parts: bytes | memoryview) -> None:
        try:
            for part in parts:
                self._sock.sendall(part)
        except OSError as exc:
            raise BulkUnavailableError(f"sending to NATS failed: {exc}") from None

    def _read_ack(self, reply: str) -> None:
        while True:
            kind, args = self._read_control()
            if kind == "-ERR":  # e.g. a payload over max_payload; the server hangs up
                raise _refusal(" ".join(args), "a chunk publish")
            if kind == "MSG":
                body = self._read_exact(int(args[-1]) + 2)[:-2]
                if args[0] != reply:
                    continue
                try:
                    answer = json.loads(body) if body else {}
                except ValueError:
                    raise TransportError(f"JetStream answered a chunk with {body[:80]!r}") from None
                error = answer.get("error") if isinstance(answer, dict) else None
                if error is not None:
                    if _ALREADY_STORED in str(error):
                        return  # stored by an earlier attempt of this very publish
                    raise TransportError(f"JetStream refused a chunk: {error}")
                return
            if kind == "HMSG":  # a no-responders status: JetStream is not there yet
                self._discard(int(args[-1]) + 2)
                if args[0] == reply:
                    raise BulkUnavailableError("JetStream did not answer a chunk publish")

    def _read_control(self) -> tuple[str, list[str]]:
        """The next protocol line that is not a PING (answered here) or +OK."""
        while True:
            end = self._buffer.find(_CRLF)
            while end < 0:
                self._fill()
                end = self._buffer.find(_CRLF)
            line = bytes(self._buffer[:end]).decode(errors="replace")
            del self._buffer[: end + 2]
            kind, _, rest = line.partition(" ")
            if kind == "PING":
                self._send(b"PONG\r\n")
            elif kind == "+OK":
                continue
            elif kind == "INFO":
                return kind, [rest]
            else:
                return kind, rest.split()

    def _fill(self) -> None:
        try:
            data = self._sock.recv(65536)
        except (OSError, TimeoutError) as exc:
            raise BulkUnavailableError(f"reading from NATS failed: {exc}") from None
        if not data:
            raise BulkUnavailableError("NATS closed the connection")
        self._buffer += data

    def _read_exact(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _read_into(self, destination: memoryview) -> None:
        buffered = min(len(self._buffer), len(destination))
        destination[:buffered] = self._buffer[:buffered]
        del self._buffer[:buffered]
        view = destination[buffered:]
        got = 0
        try:
            while got < len(view):
                count = self._sock.recv_into(view[got:])
                if count == 0:
                    raise BulkUnavailableError("NATS closed the connection during a chunk")
                got += count
        except (OSError, TimeoutError) as exc:
            raise BulkUnavailableError(f"reading a chunk from NATS failed: {exc}") from None

    def _discard(self, size: int) -> None:
        if size > 0:
            scratch = np.empty(size, np.uint8)  # rare: replies for abandoned requests
            self._read_into(memoryview(scratch))


def _refusal(text: str, what: str) -> TransportError:
    """The error for a ``-ERR`` line: a denied subject is a credentials problem."""
    if _DENIED in text.lower():
        return TransportAuthError(
            f"NATS denied {what} to this client ({text}); each role may do its own part "
            "only: check that this process has its role's credentials_file"
        )
    return TransportError(f"NATS refused {what}: {text}")


__all__ = ["BulkConnection", "BulkUnavailableError", "ChunkNotFoundError"]
