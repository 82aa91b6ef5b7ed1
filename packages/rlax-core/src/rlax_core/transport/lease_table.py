"""The state machine of a work queue: leases, redelivery and de-duplication under one lock.

A :class:`LeaseTable` holds a queue's items in memory. The in-process transport hands
out clients of one (:class:`~rlax_core.transport.inproc.InProcQueue`); a transport
server serves one per queue over the network and, to keep its queues across restarts,
gives it a :class:`QueueJournal` that records every change (the gRPC parameter server
writes it to a file).
"""

from __future__ import annotations

import heapq
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from rlax_core.errors import LeaseExpiredError
from rlax_core.types.lease import Lease, QueueStats

MAX_LEASE_S = 24 * 3600.0
"""The longest lease a queue grants unless told otherwise: a day."""


def queue_item(item_id: object, payload: object) -> bytes:
    """``payload`` as bytes, once the arguments of a ``put`` are checked.

    Raises:
        TypeError: the id is not a non-empty string, or the payload is not bytes-like.
    """
    if not isinstance(item_id, str) or not item_id:
        raise TypeError(f"item ids must be non-empty strings, got {item_id!r}")
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    return bytes(payload)


class QueueJournal(Protocol):
    """Where a queue records its changes, so a server restarted on the journal keeps them.

    Each method is called under the queue's lock, after the change, in the order the
    changes happened; replaying the calls and :meth:`LeaseTable.restore` rebuild the
    queue (leases that were live come back ready).
    """

    def added(self, item_id: str, payload: bytes) -> None:
        """An item was put."""

    def delivered(self, item_id: str) -> None:
        """An item was leased (its delivery count went up by one)."""

    def finished(self, item_id: str, dead: bool) -> None:
        """An item was acked (``dead`` False) or dropped after max_deliveries (True)."""


@dataclass
class _Delivery:
    token: str
    delivery: int
    deadline: float  # time.monotonic()


class LeaseTable:
    """The items of one queue under one lock: leases, redelivery, de-duplication, dead letters.

    Its methods are the :class:`~rlax_core.contracts.Queue` contract's, for every client
    of the queue at once (a client's :meth:`get` passes a ``check_open`` that raises once
    that client is closed). Expired leases are reclaimed lazily whenever the queue is
    touched, and a blocked :meth:`get` wakes at the earliest lease deadline, so an item
    held by a dead consumer comes back on time without a timer thread.

    Args:
        name: the queue's name.
        dedupe_window_s: how long an acked or dead item's id is remembered.
        max_deliveries: drop an item after this many deliveries without an ack (None:
            never).
        journal: records every change, so a server restarted on it keeps the queue.
        max_lease_s: the longest lease granted; a longer ask is refused (a lease that
            never ends would keep its item from everyone else for good).

    Lease tokens are random (128 bits) and compared in constant time: a client that saw
    one lease cannot guess another's.
    """

    def __init__(
        self,
        name: str,
        *,
        dedupe_window_s: float = 3600.0,
        max_deliveries: int | None = None,
        journal: QueueJournal | None = None,
        max_lease_s: float = MAX_LEASE_S,
    ) -> None:
        if max_deliveries is not None and max_deliveries < 1:
            raise ValueError(f"max_deliveries must be at least 1, got {max_deliveries}")
        self.name = name
        self._journal = journal
        # Tokens differ between incarnations of a queue restored from a journal, so a
        # lease handed out before a restart never matches one handed out after it.
        self._incarnation = secrets.token_hex(4)
        self._window = dedupe_window_s
        self._max_deliveries = max_deliveries
        self.cond = threading.Condition()
        self._payloads: dict[str, bytes] = {}  # queued or leased items
        self._deliveries: dict[str, int] = {}  # deliveries so far, per queued/leased item
        self._ready: deque[str] = deque()
        self._leased: dict[str, _Delivery] = {}
        self._deadlines: list[tuple[float, str, str]] = []  # heap of (deadline, id, token)
        # Acked or dead ids -> (monotonic time, token of the acking lease or None).
        self._done: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
        self._dead = 0
        self.max_lease_s = max_lease_s

    def put(self, item_id: str, payload: bytes) -> bool:
        payload = queue_item(item_id, payload)
        with self.cond:
            self._forget_old_ids()
            if item_id in self._payloads or item_id in self._done:
                return False
            self._payloads[item_id] = payload
            self._deliveries[item_id] = 0
            self._ready.append(item_id)
            if self._journal is not None:
                self._journal.added(item_id, self._payloads[item_id])
            self.cond.notify_all()
            return True

    def restore(
        self, items: Iterable[tuple[str, bytes, int]], done: Iterable[str], dead: int = 0
    ) -> None:
        """Loads a queue's state replayed from its journal; call before any other method.

        Args:
            items: ``(item_id, payload, deliveries so far)`` of every queued or leased
                item, in put order; all become ready.
            done: ids acked or dropped (their duplicates are ignored for the window).
            dead: items dropped after max_deliveries so far.
        """
        with self.cond:
            for item_id in done:
                self._done[item_id] = (time.monotonic(), None)
            self._dead += dead
            for item_id, payload, deliveries in items:
                self._payloads[item_id] = payload
                self._deliveries[item_id] = deliveries
                self._ready.append(item_id)
            self.cond.notify_all()

    def get(
        self, lease_s: float, timeout: float | None, check_open: Callable[[], None]
    ) -> Lease | None:
        self._check_lease_s(lease_s)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self.cond:
            while True:
                check_open()
                self._reclaim_expired()
                if self._ready:
                    return self._lease_next(lease_s)
                now = time.monotonic()
                wait = None if deadline is None else deadline - now
                if wait is not None and wait <= 0:
                    return None
                if self._deadlines:  # wake when the next lease could come back
                    until_expiry = max(0.0, self._deadlines[0][0] - now) + 1e-3
                    wait = until_expiry if wait is None else min(wait, until_expiry)
                self.cond.wait(wait)

    def ack(self, lease: Lease) -> None:
        with self.cond:
            self._reclaim_expired()
            done = self._done.get(lease.item_id)
            if done is not None and hmac.compare_digest(done[1] or "", str(lease.token)):
                return  # the same lease acked twice
            current = self._live(lease)
            if current is None:
                raise LeaseExpiredError(
                    f"lease on item {lease.item_id!r} of queue {self.name!r} ended before the "
                    "ack; the item is handed out again"
                )
            del self._leased[lease.item_id]
            self._finish(lease.item_id, token=lease.token)

    def nack(self, lease: Lease) -> None:
        with self.cond:
            self._reclaim_expired()
            if self._live(lease) is None:
                return
            del self._leased[lease.item_id]
            self._return(lease.item_id)

    def extend(self, lease: Lease, lease_s: float) -> Lease:
        self._check_lease_s(lease_s)
        with self.cond:
            self._reclaim_expired()
            current = self._live(lease)
            if current is None:
                raise LeaseExpiredError(
                    f"lease on item {lease.item_id!r} of queue {self.name!r} ended before "
                    "it was extended"
                )
            current.deadline = time.monotonic() + lease_s
            heapq.heappush(self._deadlines, (current.deadline, lease.item_id, current.token))
            return Lease(
                queue=self.name,
                item_id=lease.item_id,
                payload=lease.payload,
                token=lease.token,
                delivery=lease.delivery,
                expires_at=time.time() + lease_s,
            )

    def stats(self) -> QueueStats:
        with self.cond:
            self._reclaim_expired()
            return QueueStats(ready=len(self._ready), leased=len(self._leased), dead=self._dead)

    def _check_lease_s(self, lease_s: float) -> None:
        if not (isinstance(lease_s, int | float) and 0 < lease_s <= self.max_lease_s):
            raise ValueError(
                f"lease_s must be a number of seconds in (0, {self.max_lease_s:g}] "
                f"(the queue's max_lease_s); got {lease_s!r}"
            )

    # -- internals (all called with the lock held) --

    def _lease_next(self, lease_s: float) -> Lease:
        item_id = self._ready.popleft()
        self._deliveries[item_id] += 1
        if self._journal is not None:
            self._journal.delivered(item_id)
        token = f"{self._incarnation}.{secrets.token_urlsafe(16)}"
        deadline = time.monotonic() + lease_s
        self._leased[item_id] = _Delivery(token, self._deliveries[item_id], deadline)
        heapq.heappush(self._deadlines, (deadline, item_id, token))
        return Lease(
            queue=self.name,
            item_id=item_id,
            payload=self._payloads[item_id],
            token=token,
            delivery=self._deliveries[item_id],
            expires_at=time.time() + lease_s,
        )

    def _live(self, lease: Lease) -> _Delivery | None:
        current = self._leased.get(lease.item_id)
        if current is None or not hmac.compare_digest(current.token, str(lease.token)):
            return None
        return current

    def _reclaim_expired(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, item_id, token = heapq.heappop(self._deadlines)
            current = self._leased.get(item_id)
            # Stale heap entries (acked, nacked or extended leases) are skipped.
            if current is None or current.token != token or current.deadline > now:
                continue
            del self._leased[item_id]
            self._return(item_id)

    def _return(self, item_id: str) -> None:
        if self._max_deliveries is not None and self._deliveries[item_id] >= self._max_deliveries:
            self._dead += 1
            self._finish(item_id, token=None)
            return
        self._ready.appendleft(item_id)
        self.cond.notify_all()

    def _finish(self, item_id: str, token: str | None) -> None:
        del self._payloads[item_id]
        del self._deliveries[item_id]
        self._done[item_id] = (time.monotonic(), token)
        if self._journal is not None:
            self._journal.finished(item_id, dead=token is None)

    def _forget_old_ids(self) -> None:
        horizon = time.monotonic() - self._window
        while self._done:
            item_id, (at, _) = next(iter(self._done.items()))
            if at > horizon:
                break
            del self._done[item_id]
