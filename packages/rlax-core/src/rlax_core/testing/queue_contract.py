"""The contract every Queue implementation must pass.

Use it by subclassing and providing one fixture, ``queue_harness``::

    class TestMyQueue(QueueContract):
        @pytest.fixture
        def queue_harness(self):
            with MyHarness() as harness:
                yield harness
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from typing import Any

import pytest

from rlax_core.contracts.queue import Queue
from rlax_core.errors import LeaseExpiredError, TransportClosedError

NOTICE_S = 5.0


class QueueHarness(ABC):
    """What an implementation provides to be tested against the contract.

    Attributes:
        lease_s: a short lease that the implementation still honours reliably.
    """

    lease_s: float = 0.5

    @abstractmethod
    def open(self, name: str = "items", *, max_deliveries: int | None = None) -> Queue:
        """A new client of the named queue (a new connection, where there are any).

        Every call with the same name reaches the same queue; ``max_deliveries`` is the
        setting the queue is created with on its first open.
        """


class QueueContract:
    """Tests of the :class:`Queue` guarantees; see the class docstring there."""

    @pytest.fixture
    def queue_harness(self) -> QueueHarness:
        raise NotImplementedError("override the queue_harness fixture")

    @pytest.fixture
    def queue(self, queue_harness: QueueHarness) -> Any:
        queue = queue_harness.open()
        yield queue
        queue.close()

    def test_put_get_ack(self, queue_harness: QueueHarness, queue: Queue) -> None:
        assert queue.put("a", b"payload-a") is True
        lease = queue.get(queue_harness.lease_s * 4, timeout=NOTICE_S)
        assert lease is not None
        assert (lease.item_id, lease.payload, lease.delivery) == ("a", b"payload-a", 1)
        assert lease.queue == queue.name
        assert 0 < lease.seconds_left() <= queue_harness.lease_s * 4 + 1
        queue.ack(lease)
        assert queue.get(queue_harness.lease_s, timeout=0.3) is None

    def test_items_come_in_put_order(self, queue_harness: QueueHarness, queue: Queue) -> None:
        for i in range(10):
            queue.put(f"item-{i}", str(i).encode())
        got = []
        for _ in range(10):
            lease = queue.get(10.0, timeout=NOTICE_S)
            got.append(lease.item_id)
            queue.ack(lease)
        assert got == [f"item-{i}" for i in range(10)]

    def test_get_times_out_with_none(self, queue: Queue) -> None:
        start = time.monotonic()
        assert queue.get(1.0, timeout=0.3) is None
        assert 0.25 <= time.monotonic() - start < NOTICE_S

    def test_get_wakes_on_a_put_from_another_client(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        got: list[Any] = []
        consumer = threading.Thread(
            target=lambda: got.append(queue.get(10.0, timeout=NOTICE_S * 2))
        )
        consumer.start()
        time.sleep(0.2)
        producer = queue_harness.open()
        try:
            producer.put("late", b"x")
        finally:
            producer.close()
        consumer.join(NOTICE_S * 3)
        assert got and got[0] is not None and got[0].item_id == "late"

    def test_an_expired_lease_returns_the_item(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        queue.put("a", b"x")
        first = queue.get(queue_harness.lease_s, timeout=NOTICE_S)
        assert first is not None
        # Nobody acks: the consumer was preempted. The item comes back after the lease.
        second = queue.get(queue_harness.lease_s * 4, timeout=queue_harness.lease_s + NOTICE_S)
        assert second is not None and second.item_id == "a"
        assert second.delivery == 2
        assert second.token != first.token
        queue.ack(second)
        assert queue.get(queue_harness.lease_s, timeout=queue_harness.lease_s * 2) is None

    def test_no_second_consumer_while_the_lease_holds(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        queue.put("a", b"x")
        lease = queue.get(queue_harness.lease_s * 6, timeout=NOTICE_S)
        assert lease is not None
        other = queue_harness.open()
        try:
            assert other.get(1.0, timeout=queue_harness.lease_s * 2) is None
        finally:
            other.close()
        queue.ack(lease)

    def test_nack_returns_the_item_at_once(self, queue_harness: QueueHarness, queue: Queue) -> None:
        queue.put("a", b"x")
        lease = queue.get(60.0, timeout=NOTICE_S)
        queue.nack(lease)
        again = queue.get(60.0, timeout=NOTICE_S)
        assert again is not None and again.item_id == "a" and again.delivery == 2
        queue.ack(again)
        queue.nack(lease)  # a nack of an ended lease does nothing
        assert queue.get(1.0, timeout=0.3) is None

    def test_a_duplicate_put_is_ignored(self, queue_harness: QueueHarness, queue: Queue) -> None:
        assert queue.put("a", b"first") is True
        assert queue.put("a", b"second") is False
        lease = queue.get(10.0, timeout=NOTICE_S)
        assert lease.payload == b"first"
        assert queue.put("a", b"third") is False  # while leased
        queue.ack(lease)
        assert queue.put("a", b"fourth") is False  # after the ack
        assert queue.get(1.0, timeout=0.3) is None

    def test_an_ack_after_expiry_is_refused(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        queue.put("a", b"x")
        stale = queue.get(queue_harness.lease_s, timeout=NOTICE_S)
        time.sleep(queue_harness.lease_s * 1.5)
        with pytest.raises(LeaseExpiredError):
            queue.ack(stale)
        fresh = queue.get(queue_harness.lease_s * 6, timeout=NOTICE_S)
        assert fresh is not None and fresh.item_id == "a"
        queue.ack(fresh)
        # The old holder tries again after the new holder finished: still refused, and the
        # item is not resurrected.
        with pytest.raises(LeaseExpiredError):
            queue.ack(stale)
        assert queue.get(queue_harness.lease_s, timeout=queue_harness.lease_s * 2) is None

    def test_acking_the_same_lease_twice_is_harmless(self, queue: Queue) -> None:
        queue.put("a", b"x")
        lease = queue.get(10.0, timeout=NOTICE_S)
        queue.ack(lease)
        queue.ack(lease)
        assert queue.get(1.0, timeout=0.3) is None

    def test_extend_keeps_a_lease_alive(self, queue_harness: QueueHarness, queue: Queue) -> None:
        queue.put("a", b"x")
        lease = queue.get(queue_harness.lease_s, timeout=NOTICE_S)
        for _ in range(3):
            time.sleep(queue_harness.lease_s * 0.5)
            lease = queue.extend(lease, queue_harness.lease_s)
        other = queue_harness.open()
        try:
            assert other.get(1.0, timeout=0.1) is None
        finally:
            other.close()
        queue.ack(lease)

    def test_extend_after_expiry_is_refused(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        queue.put("a", b"x")
        lease = queue.get(queue_harness.lease_s, timeout=NOTICE_S)
        time.sleep(queue_harness.lease_s * 1.5)
        with pytest.raises(LeaseExpiredError):
            queue.extend(lease, 10.0)

    def test_competing_consumers_get_each_item_once(
        self, queue_harness: QueueHarness, queue: Queue
    ) -> None:
        n = 200
        for i in range(n):
            queue.put(f"item-{i}", i.to_bytes(4, "little"))
        seen: Counter[str] = Counter()
        lock = threading.Lock()

        def consume() -> None:
            client = queue_harness.open()
            try:
                while (lease := client.get(30.0, timeout=1.0)) is not None:
                    with lock:
                        seen[lease.item_id] += 1
                    client.ack(lease)
            finally:
                client.close()

        consumers = [threading.Thread(target=consume) for _ in range(4)]
        for c in consumers:
            c.start()
        for c in consumers:
            c.join(120)
        assert sorted(seen) == sorted(f"item-{i}" for i in range(n))
        assert set(seen.values()) == {1}

    def test_large_payload_round_trips(self, queue: Queue) -> None:
        payload = bytes(range(256)) * (4 << 12)  # 4 MiB
        queue.put("big", payload)
        lease = queue.get(30.0, timeout=NOTICE_S)
        assert lease.payload == payload
        queue.ack(lease)

    def test_named_queues_are_independent(self, queue_harness: QueueHarness, queue: Queue) -> None:
        other = queue_harness.open("other-items")
        try:
            queue.put("a", b"1")
            other.put("a", b"2")  # same id, another queue: not a duplicate
            assert other.get(10.0, timeout=NOTICE_S).payload == b"2"
            assert queue.get(10.0, timeout=NOTICE_S).payload == b"1"
        finally:
            other.close()

    def test_stats_count_ready_and_leased(self, queue: Queue) -> None:
        for i in range(3):
            queue.put(f"s-{i}", b"x")
        lease = queue.get(30.0, timeout=NOTICE_S)
        stats = queue.stats()
        assert (stats.ready, stats.leased) == (2, 1)
        queue.ack(lease)
        assert queue.stats().leased == 0

    def test_an_item_is_dropped_after_max_deliveries(self, queue_harness: QueueHarness) -> None:
        queue = queue_harness.open("poison", max_deliveries=2)
        try:
            queue.put("poison", b"x")
            for delivery in (1, 2):
                lease = queue.get(30.0, timeout=NOTICE_S)
                assert lease is not None and lease.delivery == delivery
                queue.nack(lease)
            assert queue.get(30.0, timeout=0.5) is None
            assert queue.stats().dead == 1
            assert queue.put("poison", b"x") is False
        finally:
            queue.close()

    def test_a_closed_queue_refuses_every_call(self, queue_harness: QueueHarness) -> None:
        queue = queue_harness.open()
        queue.put("a", b"x")
        lease = queue.get(30.0, timeout=NOTICE_S)
        queue.close()
        queue.close()
        for call in (
            lambda: queue.put("b", b"y"),
            lambda: queue.get(1.0, timeout=0.1),
            lambda: queue.ack(lease),
            lambda: queue.nack(lease),
            lambda: queue.extend(lease, 1.0),
            queue.stats,
        ):
            with pytest.raises(TransportClosedError):
                call()

    def test_close_wakes_a_blocked_get(self, queue_harness: QueueHarness) -> None:
        queue = queue_harness.open()
        outcome: list[Any] = []

        def get() -> None:
            try:
                outcome.append(queue.get(10.0, timeout=60))
            except BaseException as exc:
                outcome.append(exc)

        consumer = threading.Thread(target=get)
        consumer.start()
        time.sleep(0.2)
        queue.close()
        consumer.join(NOTICE_S * 2)
        assert not consumer.is_alive(), "get() kept blocking after close()"
        assert isinstance(outcome[0], TransportClosedError)
