"""Messages between a driver and its zygote: JSON plus passed file descriptors.

The two ends share a ``SOCK_SEQPACKET`` socket pair, so every message arrives whole.
File descriptors travel with ``SCM_RIGHTS``; the receiver owns the copies it gets.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

MAX_MESSAGE_BYTES = 1 << 16
MAX_FDS = 8


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """Sends one message, with ``fds`` attached when given."""
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """Receives one message and its descriptors; ``(None, [])`` when the peer is gone."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE_BYTES, MAX_FDS)
    if not data:
        for fd in fds:
            _close_quietly(fd)
        return None, []
    return json.loads(data), fds


def _close_quietly(fd: int) -> None:
    import os

    with contextlib.suppress(OSError):
        os.close(fd)
