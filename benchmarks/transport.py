"""Weight transfer and queue throughput of the transports, beside same-run baselines.

Per transport (in-process, NATS, NATS with the weights in the server's memory, gRPC, and
gRPC with signed weights: BLAKE3 digests and an Ed25519 signature instead of XXH3):
publish, fetch by 1 and 4 concurrent readers, and publish-to-all-readers time for one
parameter set (1 GB; 32 MB with --quick), each beside the same bytes over a plain TCP
socket on loopback, measured in the same run. Then queue throughput (rollouts/s with
4 KB and 256 KB items) beside the in-process queue, and the NATS object store against
the chunked streams RLAX uses. One more NATS row has no RLAX code in it: core messages
(no JetStream) relayed by nats-server from a bare publisher to a bare subscriber
(benchmarks._nats_relay), beside the socket: the server's own cost per byte.

NATS and gRPC readers, and the socket readers they are compared with, each run in a
process of their own (benchmarks._transport_reader), as inference workers do: reader
threads of one process would share one interpreter lock, which measures the harness.
The in-process store's readers are threads, and so are its socket readers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import ROOT, _nats_relay, _transport_reader, module_command
from rlax_core.bench import Bench
from rlax_core.transport.inproc import InProcParameterStore, InProcQueue
from rlax_core.transport.signing import SigningSettings, generate_signing_key

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


class _Readers:
    """Weight readers that fetch together: threads of this process, or processes.

    Args:
        readers: in-process readers (``fetch(version)``, ``wait_for_newer(than)``), or
            None to start ``count`` reader processes (benchmarks._transport_reader).
        kind, config_json: the process readers' transport and its settings.
    """

    def __init__(self, readers: list[Any] | None = None, *, kind: str = "",
                 config_json: str = "", count: int = READERS) -> None:  # fmt: skip
        self._local = readers
        self._procs: list[subprocess.Popen[str]] = []
        if readers is None:
            # A process boundary, not an import: each reader is a python of its own.
            for _ in range(count):
                self._procs.append(subprocess.Popen(
                    module_command(sys.executable, _transport_reader, kind, config_json),
                    cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                ))  # fmt: skip
            for proc in self._procs:
                self._reply(proc)
        self._waiting: list[threading.Thread] = []

    def fetch(self, count: int, version: int | None) -> float:
        """Seconds until ``count`` readers, started together, all hold ``version``."""
        if self._local is not None:
            return _concurrently([lambda r=r: r.fetch(version) for r in self._local[:count]])
        start = time.perf_counter()
        for proc in self._procs[:count]:
            self._send(proc, {"op": "fetch", "version": version})
        for proc in self._procs[:count]:
            self._reply(proc)
        return time.perf_counter() - start

    def start_waiting(self, than: int) -> None:
        """Every reader waits for a version above ``than``, then fetches it."""
        if self._local is not None:
            self._waiting = [threading.Thread(target=r.wait_for_newer, args=(than,))
                             for r in self._local]  # fmt: skip
            for thread in self._waiting:
                thread.start()
        for proc in self._procs:
            self._send(proc, {"op": "newer", "than": than})

    def all_fetched(self) -> None:
        """Returns when every waiting reader holds the new version."""
        for thread in self._waiting:
            thread.join()
        for proc in self._procs:
            self._reply(proc)

    def close(self) -> None:
        for reader in self._local or ():
            reader.close()
        for proc in self._procs:
            self._send(proc, {"op": "stop"})
            proc.wait(timeout=60)

    @staticmethod
    def _send(proc: subprocess.Popen[str], command: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()

    @staticmethod
    def _reply(proc: subprocess.Popen[str]) -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"a reader process exited with status {proc.wait()}")
        return json.loads(line)


def _bench_weights(bench: Bench, name: str, publisher: Any, readers: _Readers,
                   base: _SocketBaseline, base_readers: _Readers,
                   params: dict[str, np.ndarray], version: list[int]) -> None:  # fmt: skip
    """Publish, fetch ×1, fetch ×4 and publish-to-all for one transport vs the socket."""
    gigabytes = sum(a.nbytes for a in params.values()) / 1e9
    conn = base.connect()
    repeats = 1 if bench.quick else 3
    figures: dict[str, list[tuple[float, float]]] = {}

    def add(key: str, subject: float, baseline: float) -> None:
        figures.setdefault(key, []).append((subject, baseline))

    # Untimed: every reader allocates and touches its buffers once.
    version[0] += 1
    publisher.publish(version[0], params)
    readers.fetch(READERS, version[0])
    base_readers.fetch(READERS, None)
    for _ in range(repeats):
        version[0] += 1
        add("publish", _timed(lambda: publisher.publish(version[0], params)),
            _timed(lambda: base.publish(conn, params)))  # fmt: skip
        add("fetch, 1 reader", readers.fetch(1, version[0]), base_readers.fetch(1, None))
        add(f"fetch, {READERS} readers at once", readers.fetch(READERS, version[0]),
            base_readers.fetch(READERS, None))  # fmt: skip
        version[0] += 1
        readers.start_waiting(version[0] - 1)
        time.sleep(0.5)  # every reader is blocked in wait_for_newer
        start = time.perf_counter()
        publisher.publish(version[0], params)
        readers.all_fetched()
        subject = time.perf_counter() - start
        baseline = _timed(lambda: base.publish(conn, params)) + base_readers.fetch(READERS, None)
        add(f"publish to all {READERS} readers", subject, baseline)
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


def _signing_keys(folder: Path) -> SigningSettings:
    """A key pair for the signed-weights rows (the trainer's, so it signs)."""
    private, public = generate_signing_key()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "signing-key.pem").write_bytes(private)
    (folder / "signing.pub").write_bytes(public)
    return SigningSettings(
        public_key_file=folder / "signing.pub", private_key_file=folder / "signing-key.pem"
    )


def _bench_nats_relay(bench: Bench, url: str, base: _SocketBaseline, chunk: int) -> None:
    """Core messages relayed by nats-server to one reader (no RLAX code), beside the socket."""
    relay = _nats_relay.relay
    into = np.ones_like(base.buffer)  # touched: no page faults while timed
    conn = base.connect()
    pairs = []
    for _ in range(1 if bench.quick else 3):
        pairs.append((_timed(lambda: relay(url, base.buffer, into, chunk)),
                      _timed(lambda: base.fetch(conn, into))))  # fmt: skip
    conn.close()
    gigabytes = base.buffer.nbytes / 1e9
    bench.record("nats-server relaying core messages, publisher to 1 reader (no JetStream)",
                 subject=gigabytes / statistics.median(p[0] for p in pairs),
                 baseline=gigabytes / statistics.median(p[1] for p in pairs), unit="GB/s",
                 higher_is_better=True, subject_label="nats-server",
                 baseline_label=SOCKET)  # fmt: skip


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
        socket_json = json.dumps({"port": base.port, "nbytes": base.buffer.nbytes})
        socket_readers = None
        try:
            inproc = InProcParameterStore(keep_last=2)
            in_threads = _Readers(
                [_transport_reader._StoreReader(inproc.client()) for _ in range(READERS)]
            )
            socket_threads = _Readers(
                [
                    _transport_reader._SocketReader(base.port, base.buffer.nbytes)
                    for _ in range(READERS)
                ]
            )
            _bench_weights(bench, "inproc", inproc, in_threads, base, socket_threads, params, [0])
            in_threads.close()
            socket_threads.close()
            del inproc, in_threads, socket_threads  # 10 GB of buffers the next readers need
            socket_readers = _Readers(kind="socket", config_json=socket_json)
            nats_config = client_config(nats_server.url, keep_versions=2, chunk_mb=8,
                                        reconnect_timeout_s=120)  # fmt: skip
            # The memory-storage row is nats-server's own ceiling: the same fetch path
            # with no disk behind it.
            nats_memory = nats_config.model_copy(
                update={"namespace": f"{nats_config.namespace}m", "weight_storage": "memory"}
            )
            grpc_config = grpc_server.client_config(reconnect_timeout_s=120)
            # Signed weights: the same transfer with BLAKE3 digests and an Ed25519
            # signature instead of XXH3, in a namespace of its own.
            grpc_signed = grpc_config.model_copy(
                update={"namespace": f"{grpc_config.namespace}s",
                        "signing": _signing_keys(Path(tmp) / "keys")}
            )  # fmt: skip
            for name, kind, config, open_store in (
                ("nats", "nats", nats_config, NatsParameterStore.open),
                ("nats (memory storage)", "nats", nats_memory, NatsParameterStore.open),
                ("grpc", "grpc", grpc_config, GrpcParameterStore.open),
                ("grpc (signed weights)", "grpc", grpc_signed, GrpcParameterStore.open),
            ):  # fmt: skip
                publisher = open_store(config)
                readers = _Readers(kind=kind, config_json=config.model_dump_json())
                try:
                    _bench_weights(bench, name, publisher, readers, base, socket_readers,
                                   params, [0])  # fmt: skip
                finally:
                    readers.close()
                    publisher.close()
                if name == "nats":
                    _bench_nats_relay(bench, nats_server.url, base, nats_config.chunk_mb << 20)
                    chunked = {r.name.split("nats ")[1]: r.subject for r in bench.results
                               if r.name in ("nats publish", "nats fetch, 1 reader")}  # fmt: skip
                    _bench_object_store(bench, nats_server.url, params, chunked)
            _bench_queues(bench, "nats", lambda q: NatsQueue.open(nats_config, q))
            _bench_queues(bench, "grpc", lambda q: GrpcQueue.open(grpc_config, q))
        finally:
            if socket_readers is not None:
                socket_readers.close()
            grpc_server.stop()
            nats_server.stop()
            base.close()
