"""What the parameter server bounds, and the errors a client gets when it hits a bound.

The server has ``max_workers`` threads. A get that waits for an item, a version watch
and a streamed fetch each hold one for as long as they last, so each kind passes a
:class:`CallGate` of its own: past ``max_waiting_calls`` (or ``max_fetch_streams``) a
call is refused at once as busy (``RESOURCE_EXHAUSTED`` with a retry delay in its
trailing metadata, :data:`RETRY_AFTER_KEY`), and the threads the gates leave free
(the config keeps at least eight) serve pings, publishes, puts and acks whatever
waits. Clients retry busy calls after the delay: a blocked get polls, a version watch
falls back to polling manifests, a fetch tries again.

Quotas (namespaces, queues, items, payload bytes) refuse with ``RESOURCE_EXHAUSTED``
and no retry delay: :class:`QuotaExceededError` on the client, since trying again
would not help until someone takes items off.

Every gate counts what it holds and what it refused; ``Ping`` reports the counts and
the server's log says when a gate first fills, then at most once a minute.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rlax_core.errors import TransportError

RETRY_AFTER_KEY = "rlax-retry-after-ms"
ERROR_KIND_KEY = "rlax-error"
_LOG_EVERY_S = 60.0


class ServerBusyError(TransportError):
    """The server holds as many waiting calls (or fetch streams) as it allows; retry.

    Attributes:
        retry_after_s: how long the server asks the client to wait before retrying.
    """

    def __init__(self, message: str, retry_after_s: float = 0.2) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExceededError(TransportError):
    """A quota of the server (namespaces, queues, items, bytes) refused the call."""


def wait_seconds(value: float, limit: float) -> float:
    """How long a get may wait: ``value`` capped at ``limit`` (the client asks again).

    Raises:
        ValueError: NaN or negative.
    """
    if math.isnan(value) or value < 0:
        raise ValueError(f"timeout_s must be a non-negative number of seconds; got {value!r}")
    return min(value, limit)


class CallGate:
    """At most ``limit`` calls of one kind at once; the others are refused as busy.

    Args:
        kind: what the calls are, for messages (``"waiting calls"``).
        limit: how many may be held at once.
        setting: the config field that sets ``limit``, for messages.
    """

    def __init__(self, kind: str, limit: int, setting: str) -> None:
        self.kind = kind
        self.limit = limit
        self.setting = setting
        self._lock = threading.Lock()
        self.active = 0
        self.refused = 0
        self._logged_at: float | None = None

    def try_enter(self) -> bool:
        """Takes a place if one is free; else counts a refusal and returns False."""
        with self._lock:
            if self.active < self.limit:
                self.active += 1
                return True
            self.refused += 1
            now = time.monotonic()
            log = self._logged_at is None or now - self._logged_at >= _LOG_EVERY_S
            if log:
                self._logged_at = now
            refused = self.refused
        if log:
            print(
                f"rlax: {self.limit} {self.kind} at once, the most {self.setting} allows; "
                f"more are told to retry ({refused} so far)",
                file=sys.stderr,
                flush=True,
            )
        return False

    def leave(self) -> None:
        """Gives back a place taken by :meth:`try_enter`."""
        with self._lock:
            self.active -= 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """Holds a place for the ``with`` block.

        Raises:
            ServerBusyError: no place is free.
        """
        if not self.try_enter():
            raise ServerBusyError(
                f"the server is busy: {self.limit} {self.kind} already ({self.setting}); "
                "retry shortly"
            )
        try:
            yield
        finally:
            self.leave()
