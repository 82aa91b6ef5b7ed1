"""Weight publish/fetch and queue throughput of the transports, beside same-run baselines."""

from __future__ import annotations

import queue as stdlib_queue

import numpy as np

from rlax_core.bench import Bench
from rlax_core.transport.inproc import InProcParameterStore, InProcQueue


def _parameter_set(total_bytes: int) -> dict[str, np.ndarray]:
    # Eight equal float32 tensors, like the big matrices of a few transformer layers.
    per_tensor = total_bytes // 8 // 4
    rng = np.random.default_rng(0)
    return {f"layer.{i}.w": rng.standard_normal(per_tensor, dtype=np.float32) for i in range(8)}


def _bench_parameter_store(bench: Bench) -> None:
    total = (32 if bench.quick else 1024) << 20
    params = _parameter_set(total)
    destination = {name: np.empty_like(a) for name, a in params.items()}
    gigabytes = sum(a.nbytes for a in params.values()) / 1e9
    bench.notes["parameter_set_bytes"] = int(gigabytes * 1e9)

    def memcpy() -> None:
        for name, array in params.items():
            np.copyto(destination[name], array)

    def copy_to_new_arrays() -> None:
        # What any copying store must do at least: allocate and fill fresh memory.
        for array in params.values():
            array.copy()

    store = InProcParameterStore(keep_last=2)
    version = iter(range(1, 1_000_000))
    bench.time(
        "inproc publish (copy + checksum)",
        lambda: store.publish(next(version), params),
        copy_to_new_arrays,
        subject_label="inproc",
        baseline_label="copy into new arrays",
        work=gigabytes,
        work_unit="GB",
    )
    bench.time(
        "inproc fetch into buffers (verified)",
        lambda: store.fetch(out=destination),
        memcpy,
        subject_label="inproc",
        baseline_label="memcpy into the same buffers",
        work=gigabytes,
        work_unit="GB",
    )
    store.close()


def _bench_queue(bench: Bench) -> None:
    items = 2_000 if bench.quick else 20_000
    payload = b"r" * 4096
    counter = iter(range(10**9))

    def inproc_round_trip() -> None:
        queue = InProcQueue("rollouts")
        for _ in range(items):
            queue.put(f"id-{next(counter)}", payload)
        while (lease := queue.get(60.0)) is not None:
            queue.ack(lease)

    def stdlib_round_trip() -> None:
        queue: stdlib_queue.Queue[bytes] = stdlib_queue.Queue()
        for _ in range(items):
            queue.put(payload)
        while not queue.empty():
            queue.get()
            queue.task_done()

    bench.time(
        "queue put + lease + ack, 4 KB items",
        inproc_round_trip,
        stdlib_round_trip,
        subject_label="inproc",
        baseline_label="queue.Queue put + get (no leases, no dedupe)",
        work=items,
        work_unit="items",
    )


def run(bench: Bench) -> None:
    """Runs the transport suite."""
    _bench_parameter_store(bench)
    _bench_queue(bench)
