"""nats-server with no RLAX code around it: core messages from a publisher to a subscriber.

No JetStream, no store, no client library: both ends speak the NATS protocol on plain
sockets, the publisher sending straight from its array and the subscriber receiving each
payload straight into its buffer, as a plain-socket pair does. What this rate falls short
of the socket's is nats-server's own cost of taking a byte in and handing it on. The
publisher keeps a few messages ahead of the subscriber, never more, so the server never
buffers enough to cut the subscriber off as slow.

Used by benchmarks/transport.py, beside the same bytes over a plain socket.
"""

from __future__ import annotations

import json
import socket
import threading
from urllib.parse import urlparse

import numpy as np

SUBJECT = "rlax.bench.relay"
AHEAD = 4  # messages the publisher may be ahead of the subscriber


class _Client:
    """A bare NATS connection: INFO read, CONNECT sent, PING answered."""

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(60)  # a publisher that died leaves no subscriber waiting forever
        self.line()  # INFO
        options = {"verbose": False, "pedantic": False, "headers": False}
        self.sock.sendall(f"CONNECT {json.dumps(options)}\r\n".encode())

    def line(self) -> str:
        """The next protocol line; PINGs from the server are answered on the way."""
        while True:
            data = bytearray()
            while not data.endswith(b"\r\n"):
                byte = self.sock.recv(1)
                if not byte:
                    raise ConnectionError("nats-server closed the connection")
                data += byte
            text = data[:-2].decode()
            if text == "PING":
                self.sock.sendall(b"PONG\r\n")
            elif text != "+OK":
                return text

    def round_trip(self) -> None:
        """Returns once the server has handled everything sent before."""
        self.sock.sendall(b"PING\r\n")
        while (reply := self.line()) != "PONG":
            if reply.startswith("-ERR"):
                raise ConnectionError(f"nats-server: {reply}")

    def close(self) -> None:
        self.sock.close()


def relay(url: str, payload: np.ndarray, into: np.ndarray, chunk: int) -> None:
    """Sends ``payload`` through nats-server in ``chunk``-byte messages into ``into``."""
    source, destination = memoryview(payload).cast("B"), memoryview(into).cast("B")
    subscriber, publisher = _Client(url), _Client(url)
    subscriber.sock.sendall(f"SUB {SUBJECT} 1\r\n".encode())
    subscriber.round_trip()  # subscribed before the first message goes out
    received = threading.Semaphore(AHEAD)
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            for start in range(0, len(source), chunk):
                received.acquire()
                piece = source[start : start + chunk]
                publisher.sock.sendall(f"PUB {SUBJECT} {len(piece)}\r\n".encode())
                publisher.sock.sendall(piece)
                publisher.sock.sendall(b"\r\n")
        except BaseException as exc:  # reported by the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        got = 0
        while got < len(destination):
            header = subscriber.line().split()
            if header[0] != "MSG":
                raise ConnectionError(f"nats-server sent {' '.join(header)}")
            size = int(header[-1])
            _receive_into(subscriber.sock, destination[got : got + size])
            _receive_into(subscriber.sock, memoryview(bytearray(2)))  # the CRLF
            got += size
            received.release()
    finally:
        thread.join()
        publisher.close()
        subscriber.close()
    if errors:
        raise errors[0]


def _receive_into(sock: socket.socket, view: memoryview) -> None:
    done = 0
    while done < len(view):
        count = sock.recv_into(view[done:])
        if count == 0:
            raise ConnectionError("nats-server closed the connection mid-message")
        done += count
