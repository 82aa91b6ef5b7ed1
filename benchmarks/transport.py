"""Weight transfer and queue throughput of the transports, beside same-run baselines.

Per transport (in-process, NATS, gRPC): publish, fetch by 1 and 4 concurrent readers,
and publish-to-all-readers time for one parameter set (1 GB; 32 MB with --quick),
each beside the same bytes over a plain TCP socket on loopback, measured in the same
run. Then queue throughput (rollouts/s with 4 KB and 256 KB items) beside the
in-process queue, and the NATS object store against the chunked streams RLAX uses.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlax_core.bench import Bench
from rlax_core.transport.inproc import InProcParameterStore, InProcQueue

READERS = 4
SOCKET = "plain TCP socket, loopback"


def _parameter_set(total_bytes: int) -> dict[str, np.ndarray]:
    # Eight equal float32 tensors, like the big matrices of a few transformer layers.
    per_tensor = total_bytes // 8 // 4
    rng = np.random.default_rng(0)
    return {f"layer.{i}.w": rng.standard_normal(per_tensor, dtype=np.float32) for i in range(8)}


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _concurrently(fns: list[Callable[[], Any]]) -> float:
    """Seconds until every function has returned, all started together."""
    barrier = threading.Barrier(len(fns) + 1)
    errors: list[BaseException] = []

    def run(fn: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


class _SocketBaseline:
    """The same bytes over plain TCP on loopback: a server that stores and serves them."""

    def __init__(self, nbytes: int) -> None:
        self.buffer = np.empty(nbytes, np.uint8)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            while command := conn.recv(1):
                if command == b"P":
                    _recv_into(conn, memoryview(self.buffer))
                else:
                    conn.sendall(memoryview(self.buffer))
                conn.sendall(b"k")

    def connect(self) -> socket.socket:
        conn = socket.create_connection(("127.0.0.1", self.port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def publish(self, conn: socket.socket, params: dict[str, np.ndarray]) -> None:
        conn.sendall(b"P")
        for array in params.values():
            conn.sendall(memoryview(array.reshape(-1).view(np.uint8)))
        conn.recv(1)

    def fetch(self, conn: socket.socket, out: np.ndarray) -> None:
        conn.sendall(b"F")
        _recv_into(conn, memoryview(out))
        conn.recv(1)

    def close(self) -> None:
        self.listener.close()


def _recv_into(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        got += conn.recv_into(view[got : got + (8 << 20)])


def _bench_weights(bench: Bench, name: str, stores: list[Any], base: _SocketBaseline,
                   params: dict[str, np.ndarray], version: list[int]) -> None:  # fmt: skip
    """Publish, fetch ×1, fetch ×4 and publish-to-all for one transport vs the socket."""
    gigabytes = sum(a.nbytes for a in params.values()) / 1e9
    outs = [{n: np.empty_like(a) for n, a in params.items()} for _ in range(READERS)]
    flat_outs = [np.empty(base.buffer.nbytes, np.uint8) for _ in range(READERS)]
    conns = [base.connect() for _ in range(READERS)]
    publisher, readers = stores[0], stores[1:]
    repeats = 1 if bench.quick else 2
    figures: dict[str, list[tuple[float, float]]] = {}

    def add(key: str, subject: float, baseline: float) -> None:
        figures.setdefault(key, []).append((subject, baseline))

    for _ in range(repeats):
        version[0] += 1
        add("publish", _timed(lambda: publisher.publish(version[0], params)),
            _timed(lambda: base.publish(conns[0], params)))  # fmt: skip
        add("fetch, 1 reader", _timed(lambda: readers[0].fetch(out=outs[0])),
            _timed(lambda: base.fetch(conns[0], flat_outs[0])))  # fmt: skip
        add(
            f"fetch, {READERS} readers at once",
            _concurrently([lambda i=i: readers[i].fetch(out=outs[i]) for i in range(READERS)]),
            _concurrently([lambda i=i: base.fetch(conns[i], flat_outs[i]) for i in range(READERS)]),
        )
        version[0] += 1
        floor = version[0] - 1

        def to_all(i: int, floor: int = floor) -> None:
            newest = readers[i].wait_for_newer(floor, timeout=600)
            readers[i].fetch(newest.version, out=outs[i])

        waiting = [threading.Thread(target=to_all, args=(i,)) for i in range(READERS)]
        for thread in waiting:
            thread.start()
        time.sleep(0.3)  # every reader is blocked in wait_for_newer
        start = time.perf_counter()
        publisher.publish(version[0], params)
        for thread in waiting:
            thread.join()
        subject = time.perf_counter() - start
        baseline = _timed(lambda: base.publish(conns[0], params)) + _concurrently(
            [lambda i=i: base.fetch(conns[i], flat_outs[i]) for i in range(READERS)]
        )
        add(f"publish to all {READERS} readers", subject, baseline)
    for conn in conns:
        conn.close()
    for key, pairs in figures.items():
        s = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        if key.startswith("publish to all"):
            bench.record(f"{name} {key} (s)", subject=s, baseline=b, unit="s",
                         higher_is_better=False, subject_label=name,
                         baseline_label=SOCKET)  # fmt: skip
        else:
            readers_n = READERS if "at once" in key else 1
            bench.record(f"{name} {key}", subject=gigabytes * readers_n / s,
                         baseline=gigabytes * readers_n / b, unit="GB/s", higher_is_better=True,
                         subject_label=name, baseline_label=SOCKET)  # fmt: skip


def _bench_queues(bench: Bench, name: str, open_queue: Callable[[str], Any]) -> None:
    sizes = ((4096, 200 if bench.quick else 2000), (256 << 10, 20 if bench.quick else 200))
    for size, count in sizes:
        payload = b"r" * size

        def round_trip(queue: Any, tag: str, payload: bytes = payload, count: int = count) -> None:
            for i in range(count):
                queue.put(f"{tag}-{i}", payload)
            for _ in range(count):
                queue.ack(queue.get(60.0, timeout=30.0))

        queue = open_queue(f"bench-{size}")
        subject = count / _timed(lambda q=queue: round_trip(q, f"{name}-{time.time_ns()}"))
        baseline = count / _timed(lambda: round_trip(InProcQueue("reference"), "inproc"))
        queue.close()
        bench.record(f"{name} queue put + lease + ack, {size // 1024} KB rollouts",
                     subject=subject, baseline=baseline, unit="rollouts/s",
                     higher_is_better=True, subject_label=name,
                     baseline_label="inproc queue")  # fmt: skip


def _bench_object_store(bench: Bench, url: str, params: dict[str, np.ndarray],
                        chunked: dict[str, float]) -> None:  # fmt: skip
    """nats-py's object store (get with writeinto=) against RLAX's chunked streams."""
    import nats
    from nats.js.api import ObjectMeta, ObjectMetaOptions

    gigabytes = sum(a.nbytes for a in params.values()) / 1e9
    outs = {n: np.empty_like(a) for n, a in params.items()}

    class _Into:
        def __init__(self, array: np.ndarray) -> None:
            self.view, self.at = memoryview(array.reshape(-1).view(np.uint8)), 0

        def write(self, data: bytes) -> None:
            self.view[self.at : self.at + len(data)] = data
            self.at += len(data)

    async def run() -> tuple[float, float]:
        nc = await nats.connect(url)
        store = await nc.jetstream().create_object_store("RLAX_BENCH_OBJECTS")
        meta = ObjectMetaOptions(max_chunk_size=8 << 20)
        start = time.perf_counter()
        for name, array in params.items():
            await store.put(name, array.tobytes(), meta=ObjectMeta(options=meta))
        put = time.perf_counter() - start
        start = time.perf_counter()
        for name in params:
            await store.get(name, writeinto=_Into(outs[name]))
        get = time.perf_counter() - start
        await nc.jetstream().delete_object_store("RLAX_BENCH_OBJECTS")
        await nc.close()
        return put, get

    put, get = asyncio.run(run())
    for key, seconds in (("publish", put), ("fetch, 1 reader", get)):
        bench.record(f"nats {key}: chunked streams vs object store", subject=chunked[key],
                     baseline=gigabytes / seconds, unit="GB/s", higher_is_better=True,
                     subject_label="chunked streams",
                     baseline_label="nats-py object store")  # fmt: skip


def run(bench: Bench) -> None:
    """Runs the transport suite."""
    from rlax_transport_grpc import GrpcParameterStore, GrpcQueue
    from rlax_transport_grpc.testing import ServeProcess
    from rlax_transport_nats import NatsParameterStore, NatsQueue, NatsServerProcess
    from rlax_transport_nats.testing import client_config

    total = (32 if bench.quick else 1024) << 20
    params = _parameter_set(total)
    bench.notes["parameter_set_bytes"] = sum(a.nbytes for a in params.values())
    bench.notes["readers"] = READERS
    base = _SocketBaseline(bench.notes["parameter_set_bytes"])
    with tempfile.TemporaryDirectory(prefix="rlax-bench-") as tmp:
        nats_server = NatsServerProcess(store_dir=Path(tmp) / "js")
        grpc_server = ServeProcess(Path(tmp) / "grpc", keep_versions=2)
        nats_server.start()
        grpc_server.start()
        try:
            inproc = InProcParameterStore(keep_last=2)
            _bench_weights(bench, "inproc", [inproc] + [inproc.client() for _ in range(READERS)],
                           base, params, [0])  # fmt: skip
            nats_config = client_config(nats_server.url, keep_versions=2, chunk_mb=8,
                                        reconnect_timeout_s=120)  # fmt: skip
            stores = [NatsParameterStore.open(nats_config) for _ in range(READERS + 1)]
            _bench_weights(bench, "nats", stores, base, params, [0])
            for store in stores:
                store.close()
            chunked = {r.name.split("nats ")[1]: r.subject for r in bench.results
                       if r.name in ("nats publish", "nats fetch, 1 reader")}  # fmt: skip
            _bench_object_store(bench, nats_server.url, params, chunked)
            grpc_config = grpc_server.client_config(reconnect_timeout_s=120)
            stores = [GrpcParameterStore.open(grpc_config) for _ in range(READERS + 1)]
            _bench_weights(bench, "grpc", stores, base, params, [0])
            for store in stores:
                store.close()
            _bench_queues(bench, "nats", lambda q: NatsQueue.open(nats_config, q))
            _bench_queues(bench, "grpc", lambda q: GrpcQueue.open(grpc_config, q))
        finally:
            grpc_server.stop()
            nats_server.stop()
            base.close()
