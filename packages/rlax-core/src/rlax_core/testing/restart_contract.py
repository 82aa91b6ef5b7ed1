"""The contract a networked transport keeps across a restart of its server.

A server that dies and comes back (a crash, a preemption, a rolling update) must lose
nothing and hand out nothing torn: the publisher goes on publishing, readers go on
reading whole versions, and every queued item is still there. Use it by subclassing
and providing one fixture, ``restart_harness``::

    class TestMyRestart(RestartContract):
        @pytest.fixture
        def restart_harness(self, tmp_path):
            harness = MyRestartHarness(tmp_path)
            yield harness
            harness.stop()
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import pytest

from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.contracts.queue import Queue
from rlax_core.errors import VersionNotFoundError

# Items queued before the restart, and the bound on waiting for reads after it.
QUEUED_ITEMS = 50
RECOVERY_S = 60.0


class RestartHarness(ABC):
    """A started server, clients of it, and the way to restart it.

    Attributes:
        keep_last: the retention every store is opened with (the suite checks it).
        restores_leases: a lease that was live when the server died is ready again as
            soon as the server is back (a server that journals its queues); False where
            it comes back only when its lease expires.
    """

    keep_last: int = 3
    restores_leases: bool = False

    @abstractmethod
    def open_store(self) -> ParameterStore:
        """A new client of the store, patient enough to ride out the restart (~30 s)."""

    @abstractmethod
    def open_queue(self, name: str) -> Queue:
        """A new client of the queue ``name``, patient enough to ride out the restart."""

    @abstractmethod
    def restart(self) -> None:
        """Ends the server abruptly and starts it again on the same address and state."""


def _params(version: int) -> dict[str, np.ndarray]:
    """Three tensors of 1.2 MB whose every element is ``version``: a torn read shows."""
    return {f"w{i}": np.full(300_000, version, np.float32) for i in range(3)}


class RestartContract:
    """Publisher, readers and a queue through a server restart (needs ``restart_harness``)."""

    pytestmark: ClassVar = [pytest.mark.network, pytest.mark.slow]

    def test_publisher_readers_and_queue_survive_a_server_restart(
        self, restart_harness: RestartHarness
    ) -> None:
        harness = restart_harness
        publisher = harness.open_store()
        queue = harness.open_queue("rollouts")
        for i in range(QUEUED_ITEMS):
            queue.put(f"item-{i}", f"payload-{i}".encode())
        # Leased when the server dies: it must come back (at once, where leases are restored).
        held = queue.get(60.0, timeout=5.0) if harness.restores_leases else None
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
            reader = harness.open_store()
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
                        assert np.all(array == newest.version), (
                            f"{name} of {newest.version} is torn"
                        )
                    seen = newest.version
                    if restarted.is_set():
                        reads_after_restart[0] += 1
            except BaseException as exc:
                problems.append(exc)
            finally:
                reader.close()

        threads = [threading.Thread(target=publish)]
        threads += [threading.Thread(target=read) for _ in range(2)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            harness.restart()
            restarted.set()
            # Until both readers have seen versions published after the restart (bounded).
            deadline = time.monotonic() + RECOVERY_S
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
            assert publisher.versions() == published[-harness.keep_last :]
            if harness.restores_leases:
                assert queue.put("item-3", b"again") is False  # still known: not a new item
            got = []
            while (lease := queue.get(30.0, timeout=1.0)) is not None:
                got.append(lease.item_id)
                queue.ack(lease)
            assert sorted(got) == sorted(f"item-{i}" for i in range(QUEUED_ITEMS))
            if held is not None:
                assert held.item_id == "item-0"
        finally:
            publisher.close()
            queue.close()
