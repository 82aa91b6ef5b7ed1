"""What a queue hands out: an item under a time-limited lease."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """One delivery of a queue item to one consumer.

    The consumer owns the item until ``expires_at``; then the queue may hand it to
    someone else. ``token`` identifies this delivery: an ack with a lease whose
    delivery has been superseded is refused.

    Attributes:
        queue: name of the queue the item came from.
        item_id: the id given at ``put``; the unit of idempotency.
        payload: the item's bytes.
        token: opaque id of this delivery.
        delivery: 1 for the first delivery, 2 after one expiry or nack, ...
        expires_at: end of the lease, seconds since the epoch.
    """

    queue: str
    item_id: str
    payload: bytes
    token: str
    delivery: int
    expires_at: float

    def seconds_left(self) -> float:
        """Seconds until the lease runs out (negative once it has)."""
        return self.expires_at - time.time()


@dataclass(frozen=True)
class QueueStats:
    """Counts of a queue's items at one moment.

    Attributes:
        ready: items waiting for a consumer.
        leased: items under an unexpired lease.
        dead: items dropped after ``max_deliveries`` deliveries without an ack.
    """

    ready: int
    leased: int
    dead: int = 0
