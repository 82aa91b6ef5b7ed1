"""A parameter server killed and restarted mid-run: nothing lost, nothing corrupt."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rlax_core.errors import VersionNotFoundError
from rlax_transport_grpc import GrpcParameterStore, GrpcQueue
from rlax_transport_grpc.testing import ServeProcess

pytestmark = [pytest.mark.network, pytest.mark.slow]


def _params(version: int) -> dict[str, np.ndarray]:
    return {f"w{i}": np.full(300_000, version, np.float32) for i in range(3)}


def test_publisher_readers_and_queue_survive_a_server_restart(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "state", keep_versions=3, chunk_mb=1)
    server.start()
    config = server.client_config(reconnect_timeout_s=30.0)
    publisher = GrpcParameterStore.open(config)
    queue = GrpcQueue.open(config, "rollouts")
    for i in range(50):
        queue.put(f"item-{i}", f"payload-{i}".encode())
    held = queue.get(60.0, timeout=5.0)  # leased when the server dies: it must come back
    published: list[int] = []
    problems: list[BaseException] = []
    reads_after_restart = [0]
    restarted = threading.Event()
    done = threading.Event()

    def publish() -> None:
        try:
            version = 1
            while not done.is_set():
                publisher.publish(version, _params(version))
                published.append(version)
                version += 1
                time.sleep(0.05)
        except BaseException as exc:
            problems.append(exc)

    def read() -> None:
        reader = GrpcParameterStore.open(config)
        try:
            seen = 0
            while not done.is_set():
                newest = reader.wait_for_newer(seen, timeout=0.5)
                if newest is None:
                    continue
                try:
                    fetched = reader.fetch(newest.version)
                except VersionNotFoundError:
                    continue  # evicted meanwhile: the next one will do
                for name, array in fetched.arrays.items():
                    assert np.all(array == newest.version), f"{name} of {newest.version} is torn"
                seen = newest.version
                if restarted.is_set():
                    reads_after_restart[0] += 1
        except BaseException as exc:
            problems.append(exc)
        finally:
            reader.close()

    threads = [threading.Thread(target=publish)] + [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        server.restart()  # SIGKILL, then a new process on the same state folder
        restarted.set()
        # Until both readers have seen versions published after the restart (bounded).
        deadline = time.monotonic() + 60
        while reads_after_restart[0] < 4 and time.monotonic() < deadline and not problems:
            time.sleep(0.1)
    finally:
        done.set()
        for thread in threads:
            thread.join(60)
    try:
        assert not problems, problems[0]
        assert reads_after_restart[0] > 0
        assert publisher.latest().version == published[-1]
        assert publisher.versions() == published[-3:]
        # The queue's journal brought back every item, the leased one again ready.
        assert queue.put("item-3", b"again") is False  # still known: not a new item
        got = []
        while (lease := queue.get(30.0, timeout=1.0)) is not None:
            got.append(lease.item_id)
            queue.ack(lease)
        assert sorted(got) == sorted(f"item-{i}" for i in range(50))
        assert held.item_id == "item-0"
    finally:
        publisher.close()
        queue.close()
        server.stop()
