"""Weight bytes over a plain TCP port beside the gRPC service: no copies on either side.

A gRPC stream copies every chunk into a frame on the server, into a message buffer and
a ``bytes`` on the client, and then into the destination: on a loopback, a fetch ran at
about half the speed of a plain socket (`rlax bench transport`). For the bulk of a
fetch the server therefore also listens on a TCP port of its own:

1. the client asks ``OpenBulkFetch`` (an ordinary gRPC call: credential, role,
   namespace and TLS checked as for any other) and gets a one-time ticket and the port;
2. it connects there (over TLS when the channel uses TLS, with its client certificate
   under mutual TLS) and sends its credential (a 2-byte big-endian length, then the
   ``ROLE:SECRET`` line or the shared token; length 0 where the server has none) and
   the ticket;
3. the server answers one status byte, then the raw bytes of every requested tensor
   in the requested order, sent straight from their memory maps; the client receives
   them straight into the destination arrays, hashing as they arrive.

A ticket is 16 random bytes, good for one connection within a minute; a connection
whose credential the server does not accept, or whose ticket it does not know, gets
status 0 and nothing else. At most ``max_connections`` connections are served at once
(a thread each, for at most five seconds before the ticket is in); more are closed as
they are accepted, so idle connections cannot pile up threads. The counts
(:attr:`BulkSender.active`, :attr:`BulkSender.refused`) are reported by ``Ping``. A
client that cannot use the port (a proxy in between, a firewall) falls back to the gRPC
stream, which stays the reference path.
"""

from __future__ import annotations

import secrets
import socket
import ssl
import struct
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rlax_core.errors import TransportAuthError
from rlax_core.kit.transport import IncomingChecksum

if TYPE_CHECKING:
    from rlax_transport_grpc.access import Gatekeeper

TICKET_BYTES = 16
TICKET_TTL_S = 60.0
HELLO_TIMEOUT_S = 5.0  # to finish TLS and send the credential and ticket
_LENGTH = struct.Struct(">H")
_MAX_CREDENTIAL = 1024
_OK, _REFUSED = b"\x01", b"\x00"
_PIECE = 8 << 20  # bytes per recv_into: hashed while still in cache


class BulkRefusedError(ConnectionError):
    """The server did not know the ticket (expired, used, or from another server)."""


class BulkSender:
    """The server side: issues tickets and serves them on a TCP port.

    Args:
        host: interface to listen on (the gRPC service's).
        port: 0 for any free port.
        tls: wraps every connection when the gRPC service uses TLS.
        gatekeeper: checks each connection's credential (None: none is asked).
        max_connections: connections served at once.
    """

    def __init__(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None,
        *,
        gatekeeper: Gatekeeper | None = None,
        max_connections: int = 16,
    ) -> None:
        self._listener = socket.create_server((host, port))
        self.port = int(self._listener.getsockname()[1])
        self._tls = tls
        self._gatekeeper = gatekeeper
        self._max_connections = max_connections
        self._tickets: dict[bytes, tuple[float, list[np.ndarray]]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.active = 0  # connections being served
        self.refused = 0  # connections closed: past the cap, or a bad credential or ticket
        threading.Thread(target=self._accept, name="rlax-grpc-bulk", daemon=True).start()

    def issue(self, arrays: Sequence[np.ndarray]) -> bytes:
        """A ticket for these arrays' bytes, in this order."""
        ticket = secrets.token_bytes(TICKET_BYTES)
        now = time.monotonic()
        with self._lock:
            for old in [t for t, (at, _) in self._tickets.items() if now - at > TICKET_TTL_S]:
                del self._tickets[old]
            self._tickets[ticket] = (now, list(arrays))
        return ticket

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            self._tickets.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                full = self.active >= self._max_connections
                self.refused += int(full)
                self.active += int(not full)
            if full:  # no thread for it: closed at once
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(HELLO_TIMEOUT_S)  # a connection that says nothing is dropped
            conn = self._tls.wrap_socket(raw, server_side=True) if self._tls else raw
            with conn:
                (length,) = _LENGTH.unpack(_receive_exactly(conn, _LENGTH.size))
                if length > _MAX_CREDENTIAL:
                    raise ConnectionError("a credential longer than any")
                presented = _receive_exactly(conn, length).decode(errors="replace")
                ticket = _receive_exactly(conn, TICKET_BYTES)
                if not self._authenticated(presented):
                    self._refuse(conn)
                    return
                with self._lock:
                    entry = self._tickets.pop(ticket, None)
                if entry is None or time.monotonic() - entry[0] > TICKET_TTL_S:
                    self._refuse(conn)
                    return
                conn.settimeout(None)  # a slow reader may take minutes for a large set
                conn.sendall(_OK)
                for array in entry[1]:
                    if array.nbytes:
                        conn.sendall(
                            memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
                        )
        except OSError:  # ConnectionError and ssl.SSLError are OSErrors
            pass  # the client went away (or never spoke); it falls back or retries
        finally:
            raw.close()
            with self._lock:
                self.active -= 1

    def _authenticated(self, presented: str) -> bool:
        if self._gatekeeper is None:
            return True
        try:
            self._gatekeeper.holder_of(presented)
        except TransportAuthError:
            return False
        return True

    def _refuse(self, conn: socket.socket) -> None:
        with self._lock:
            self.refused += 1
        conn.sendall(_REFUSED)


def receive(address: tuple[str, int], credential: str, ticket: bytes,
            destinations: Sequence[memoryview], checksums: Sequence[IncomingChecksum],
            tls: ssl.SSLContext | None, server_name: str, timeout: float) -> None:  # fmt: skip
    """Receives a ticket's bytes straight into ``destinations``, adding them to ``checksums``.

    Args:
        address: the server's host and bulk port.
        credential: this client's credential line or token ("" for none).
        ticket: from ``OpenBulkFetch``.
        destinations: flat byte views, in the ticket's order, of exactly its sizes.
        checksums: one per destination, fed every piece as it lands.
        tls: the context to connect with, when the channel uses TLS.
        server_name: the name the server's certificate must carry.
        timeout: seconds any one receive may wait.

    Raises:
        BulkRefusedError: the server refused the ticket.
        ConnectionError, OSError: the connection failed or ended early.
    """
    with socket.create_connection(address, timeout=timeout) as raw:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = tls.wrap_socket(raw, server_hostname=server_name) if tls else raw
        with conn:
            line = credential.encode()
            conn.sendall(_LENGTH.pack(len(line)) + line + ticket)
            if _receive_exactly(conn, 1) != _OK:
                raise BulkRefusedError(
                    f"the bulk port {address[1]} refused the credential or the ticket"
                )
            for flat, checksum in zip(destinations, checksums, strict=True):
                got = 0
                while got < len(flat):
                    size = conn.recv_into(flat[got : got + _PIECE])
                    if size == 0:
                        raise ConnectionError("the bulk connection closed mid-transfer")
                    checksum.add(got, flat[got : got + size])
                    got += size


def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise ConnectionError("the bulk connection closed")
        data += more
    return data
