"""One weight reader of the transport benchmark, in a process of its own.

    python -m benchmarks._transport_reader {nats|grpc|socket} CONFIG_JSON  # from the root

Readers are inference workers, and every deployment runs each in its own process: the
benchmark starts its concurrent readers as processes, so that they do not share one
interpreter lock, as no real pair of workers does. For ``socket`` the config is
``{"port": P, "nbytes": N}`` of the benchmark's plain TCP server.

Reads one JSON command per line on stdin and answers one JSON line on stdout:

* ``{"op": "fetch", "version": V}``: fetch it into this reader's buffers (allocated
  and touched by the first fetch, then reused); answers ``{"seconds": S}``.
* ``{"op": "newer", "than": V}``: wait for a version above V, then fetch it; answers
  ``{"version": W}``.
* ``{"op": "stop"}``: close and exit.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

import numpy as np


class _SocketReader:
    """The baseline: the same bytes from the benchmark's plain TCP server."""

    def __init__(self, port: int, nbytes: int) -> None:
        self.conn = socket.create_connection(("127.0.0.1", port))
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.out = np.ones(nbytes, np.uint8)  # touched: no page faults while timed

    def fetch(self, version: int | None = None) -> None:
        self.conn.sendall(b"F")
        view, got = memoryview(self.out), 0
        while got < len(view):
            got += self.conn.recv_into(view[got : got + (8 << 20)])
        self.conn.recv(1)

    def close(self) -> None:
        self.conn.close()


class _StoreReader:
    """A transport's parameter store client, fetching into buffers it keeps."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.out: dict[str, np.ndarray] | None = None

    def fetch(self, version: int | None = None) -> None:
        if self.out is None:  # the first fetch allocates; a store may return read-only views
            fetched = self.store.fetch(version)
            self.out = {name: np.array(array) for name, array in fetched.arrays.items()}
        else:
            self.store.fetch(version, out=self.out)

    def wait_for_newer(self, than: int) -> int:
        newest = self.store.wait_for_newer(than, timeout=600)
        if newest is None:
            raise TimeoutError(f"no version above {than} within 600 s")
        self.fetch(newest.version)
        return newest.version

    def close(self) -> None:
        self.store.close()


def _open(kind: str, config_json: str) -> Any:
    if kind == "socket":
        settings = json.loads(config_json)
        return _SocketReader(settings["port"], settings["nbytes"])
    if kind == "nats":
        from rlax_transport_nats import NatsParameterStore
        from rlax_transport_nats.config import NatsTransportConfig

        return _StoreReader(
            NatsParameterStore.open(NatsTransportConfig.model_validate_json(config_json))
        )
    if kind == "grpc":
        from rlax_transport_grpc import GrpcParameterStore
        from rlax_transport_grpc.config import GrpcTransportConfig

        return _StoreReader(
            GrpcParameterStore.open(GrpcTransportConfig.model_validate_json(config_json))
        )
    raise SystemExit(f"unknown reader kind {kind!r}: use nats, grpc or socket")


def main() -> None:
    reader = _open(sys.argv[1], sys.argv[2])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "stop":
            break
        if command["op"] == "fetch":
            start = time.perf_counter()
            reader.fetch(command.get("version"))
            reply: dict[str, Any] = {"seconds": time.perf_counter() - start}
        else:
            reply = {"version": reader.wait_for_newer(command["than"])}
        print(json.dumps(reply), flush=True)
    reader.close()


if __name__ == "__main__":
    main()
