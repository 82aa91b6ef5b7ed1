"""Leases kept alive from a thread, however long the work on their items takes.

A worker holds its prompt groups' leases while it generates; one step of that work (a
first compile, a large model's weights pulled, a long decode burst) may outlast a lease,
and a lease that runs out hands its group to another worker, to be generated twice. The
keeper renews every lease it holds once half of it has gone, from its own thread, so no
step of the caller's has to be shorter than half a lease.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator

from rlax_core.contracts.queue import Queue
from rlax_core.errors import LeaseExpiredError, TransportClosedError, TransportError
from rlax_core.types.lease import Lease


class LeaseKeeper:
    """Renews the leases it holds on ``queue`` by ``lease_s`` once half of each has gone.

    :meth:`hold` a lease under a key, :meth:`release` it (the current, renewed lease)
    before acking or nacking it: a lease is never renewed once released, so an ack never
    races a renewal. A lease that runs out anyway (the queue was away longer than half a
    lease) stays as it was: its item went to another worker, and the ack that follows
    says so.
    """

    def __init__(self, queue: Queue, lease_s: float) -> None:
        self._queue = queue
        self._lease_s = lease_s
        self._held: dict[Hashable, Lease] = {}
        self._ended: set[Hashable] = set()  # ran out: not renewed again
        # Held across a renewal round, so release() waits for a round in progress.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, key: Hashable, lease: Lease) -> None:
        """Keeps ``lease`` alive under ``key`` (replacing a lease held there)."""
        with self._lock:
            self._held[key] = lease
            self._ended.discard(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()

    def release(self, key: Hashable) -> Lease:
        """The current lease under ``key``, no longer renewed."""
        with self._lock:
            self._ended.discard(key)
            return self._held.pop(key)

    def close(self) -> dict[Hashable, Lease]:
        """Stops renewing and lets go of every lease (a later :meth:`hold` starts again);
        the current lease of every key that was still held."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            held, self._held = self._held, {}
            self._ended.clear()
            self._thread = None
            self._stop.clear()
            return held

    def _run(self) -> None:
        # Looked at eight times a lease, each renewed with half of it left: a round may
        # come up to three eighths of a lease late (a loaded host) and still be in time.
        while not self._stop.wait(self._lease_s / 8):
            with self._lock:
                if not self._renew_round():
                    return

    def _renew_round(self) -> bool:
        """Renews each lease past its half; False once the queue has closed."""
        for key, lease in list(self._held.items()):
            if key in self._ended or lease.seconds_left() > self._lease_s / 2:
                continue
            try:
                self._held[key] = self._queue.extend(lease, self._lease_s)
            except LeaseExpiredError:
                self._ended.add(key)
            except TransportClosedError:
                return False
            except TransportError:
                break  # the server is away: the next round tries again
        return True


@contextlib.contextmanager
def renewing(queue: Queue, leases: list[Lease], lease_s: float) -> Iterator[list[Lease]]:
    """Keeps ``leases`` alive while the block runs (one long generation, say). Yields a
    list that holds the current leases once the block ends; use those from then on."""
    keeper = LeaseKeeper(queue, lease_s)
    for i, lease in enumerate(leases):
        keeper.hold(i, lease)
    current = list(leases)
    try:
        yield current
    finally:
        held = keeper.close()
        current[:] = [held[i] for i in range(len(leases))]
