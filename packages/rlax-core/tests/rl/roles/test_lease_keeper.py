"""The lease keeper, against the real in-process queue."""

from __future__ import annotations

import time

from rlax_core.rl.roles.lease_keeper import LeaseKeeper, renewing
from rlax_core.transport.inproc import InProcTransport

LEASE_S = 0.4


def _queue(items: int):
    queue = InProcTransport().queue("prompts")
    for i in range(items):
        queue.put(f"g{i}", b"x")
    return queue


def test_held_leases_outlive_their_lease_and_a_released_one_is_not_renewed() -> None:
    queue = _queue(2)
    keeper = LeaseKeeper(queue, LEASE_S)
    first, second = (queue.get(LEASE_S) for _ in range(2))
    keeper.hold("a", first)
    keeper.hold("b", second)
    time.sleep(3 * LEASE_S)  # three leases: both renewed meanwhile
    assert queue.stats().leased == 2
    released = keeper.release("a")
    assert released.expires_at > first.expires_at
    time.sleep(2 * LEASE_S)  # the released lease runs out; the held one does not
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 1)
    held = keeper.close()
    assert list(held) == ["b"]
    queue.ack(held["b"])  # the renewed lease is the live one
    assert queue.stats().leased == 0


def test_a_closed_keeper_stops_renewing_and_starts_again_on_hold() -> None:
    queue = _queue(2)
    keeper = LeaseKeeper(queue, LEASE_S)
    keeper.hold("a", queue.get(LEASE_S))
    keeper.close()
    keeper.hold("b", queue.get(LEASE_S))
    time.sleep(3 * LEASE_S)
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 1)  # "a" ran out, "b" kept
    queue.ack(keeper.close()["b"])


def test_renewing_hands_back_the_renewed_leases() -> None:
    queue = _queue(2)
    leases = [queue.get(LEASE_S) for _ in range(2)]
    with renewing(queue, leases, LEASE_S) as current:
        time.sleep(3 * LEASE_S)
    for lease in current:
        queue.ack(lease)
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (0, 0)
