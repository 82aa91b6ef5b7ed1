"""What the inference worker's and the verifier's loops share.

Both are stateless loops over a queue: lease a batch of items (up to a size, waiting a
short poll for the first), work on them, send the results on, ack; until asked to stop
or the transport closes. A thread of the embedded run reports an exception through
``on_error`` (which stops the run); a process lets it end the process.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from rlax_core.contracts.queue import Queue
from rlax_core.errors import TransportClosedError
from rlax_core.types.lease import Lease

POLL_S = 0.2
"""How long a loop waits for the first item of a batch before it looks at ``stop``."""


class LeasingLoop(ABC):
    """A role that works on leased batches until stopped."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The loop's name in status files and in what it sends."""

    @abstractmethod
    def step(self, stop: threading.Event | None = None) -> bool:
        """Works on one leased batch; False if none arrived within the poll."""

    def run(
        self, stop: threading.Event, on_error: Callable[[BaseException], None] | None = None
    ) -> None:
        """Works until ``stop`` is set or the transport closes."""
        try:
            while not stop.is_set():
                self.step(stop)
        except TransportClosedError:
            return
        except BaseException as exc:
            if on_error is None:
                raise
            on_error(exc)


def lease_batch(queue: Queue, lease_s: float, size: int) -> list[Lease]:
    """Up to ``size`` items of ``queue``, leased for ``lease_s``; [] if none came in a poll."""
    first = queue.get(lease_s, timeout=POLL_S)
    if first is None:
        return []
    leases = [first]
    while len(leases) < size:
        more = queue.get(lease_s, timeout=0)
        if more is None:
            break
        leases.append(more)
    return leases
