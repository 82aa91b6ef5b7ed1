"""The work queue that carries prompt groups to workers and rollouts back to the trainer."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlax_core.types.lease import Lease, QueueStats


class Queue(ABC):
    """An at-least-once work queue with leases and idempotent item ids.

    Guarantees every implementation gives (checked by
    :class:`rlax_core.testing.QueueContract`):

    * **Leases.** :meth:`get` hands an item to one consumer under a lease of
      ``lease_s`` seconds. Until the lease ends no other consumer gets the item. When it
      ends without an :meth:`ack` (the consumer was preempted), the item is handed out
      again, with ``delivery`` increased by one.
    * **Idempotent ids.** Every item has an id. A :meth:`put` of an id that is queued,
      leased, or was acked within the queue's de-duplication window is ignored and
      returns False. An acked item is never delivered again: neither a duplicate put
      nor a late ack can resurrect it.
    * **Late acks are refused.** :meth:`ack` or :meth:`extend` after the lease ended raise
      ``LeaseExpiredError`` (the item is, or will be, someone else's). Acking the same
      live lease twice is harmless.
    * **Order.** Items are first handed out in put order (from one producer). Where a
      returned item goes in the order is the implementation's choice.
    * **Dead letters.** With ``max_deliveries`` set, an item delivered that many times
      without an ack is dropped and counted in :meth:`stats` as dead.
    * **Closing.** After :meth:`close`, every method raises ``TransportClosedError``,
      including a :meth:`get` blocked in another thread.

    Implementations are safe to use from several threads at once.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """The queue's name, e.g. ``"prompts"`` or ``"rollouts"``."""

    @abstractmethod
    def put(self, item_id: str, payload: bytes) -> bool:
        """Enqueues an item.

        Returns:
            True if the item was added; False if the id was already known (a duplicate).
        """

    @abstractmethod
    def get(self, lease_s: float, timeout: float | None = 0.0) -> Lease | None:
        """Takes the next item under a lease.

        Args:
            lease_s: how long the consumer owns the item before it is handed out again.
            timeout: seconds to wait for an item; 0 does not wait, None waits forever.

        Returns:
            The lease, or None if no item arrived within the timeout.
        """

    @abstractmethod
    def ack(self, lease: Lease) -> None:
        """Marks the leased item done; it will never be delivered again.

        Raises:
            LeaseExpiredError: the lease ended before the ack arrived.
        """

    @abstractmethod
    def nack(self, lease: Lease) -> None:
        """Hands the item back at once (the consumer cannot process it now).

        A nack of a lease that already ended does nothing.
        """

    @abstractmethod
    def extend(self, lease: Lease, lease_s: float) -> Lease:
        """Renews a live lease for ``lease_s`` more seconds from now.

        Raises:
            LeaseExpiredError: the lease already ended.
        """

    @abstractmethod
    def stats(self) -> QueueStats:
        """Counts of ready, leased and dead items."""

    @abstractmethod
    def close(self) -> None:
        """Releases this client's resources; idempotent. Queued items are kept."""

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
