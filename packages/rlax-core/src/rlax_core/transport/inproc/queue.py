"""The in-process work queue: clients of one lease table, shared by the threads of a process.

The items, leases and de-duplication live in a
:class:`~rlax_core.transport.lease_table.LeaseTable`; a client adds only ``close``.
"""

from __future__ import annotations

from rlax_core.contracts.queue import Queue
from rlax_core.errors import TransportClosedError
from rlax_core.transport.lease_table import LeaseTable
from rlax_core.types.lease import Lease, QueueStats


class InProcQueue(Queue):
    """A thread-safe in-process queue (see :class:`~rlax_core.contracts.Queue`).

    Every thread may share one instance; :meth:`client` gives a separately closable
    handle on the same items.

    Args:
        name: the queue's name.
        dedupe_window_s: how long an acked or dead item's id is remembered, so that a
            duplicate put of it is ignored.
        max_deliveries: drop an item after this many deliveries without an ack (None:
            never).
    """

    def __init__(
        self,
        name: str,
        *,
        dedupe_window_s: float = 3600.0,
        max_deliveries: int | None = None,
    ) -> None:
        self._init(LeaseTable(name, dedupe_window_s=dedupe_window_s, max_deliveries=max_deliveries))

    @classmethod
    def of(cls, table: LeaseTable) -> InProcQueue:
        """A client of ``table`` (e.g. one a transport server restored from its journal)."""
        queue = cls.__new__(cls)
        queue._init(table)
        return queue

    def _init(self, table: LeaseTable) -> None:
        self._state = table
        self._closed = False

    def client(self) -> InProcQueue:
        """Another client of the same items; closing one client leaves the others open."""
        return InProcQueue.of(self._state)

    @property
    def name(self) -> str:
        return self._state.name

    def put(self, item_id: str, payload: bytes) -> bool:
        self._check_open()
        return self._state.put(item_id, payload)

    def get(self, lease_s: float, timeout: float | None = 0.0) -> Lease | None:
        self._check_open()
        return self._state.get(lease_s, timeout, self._check_open)

    def ack(self, lease: Lease) -> None:
        self._check_open()
        self._state.ack(lease)

    def nack(self, lease: Lease) -> None:
        self._check_open()
        self._state.nack(lease)

    def extend(self, lease: Lease, lease_s: float) -> Lease:
        self._check_open()
        return self._state.extend(lease, lease_s)

    def stats(self) -> QueueStats:
        self._check_open()
        return self._state.stats()

    def close(self) -> None:
        self._closed = True
        with self._state.cond:  # wake this client's blocked get()
            self._state.cond.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(f"this client of in-process queue {self.name!r} is closed")
