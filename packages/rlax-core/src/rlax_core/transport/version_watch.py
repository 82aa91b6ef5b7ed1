"""The newest policy version a store client has heard of, and waiting for a newer one.

A networked store client learns of new versions as they happen (a subscription, a
server stream), on a thread of its own; :meth:`ParameterStore.wait_for_newer` waits for
that news. :class:`VersionWatch` is the condition between the two, and the client's
closed flag, so that closing wakes every waiter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class VersionWatch:
    """The newest version heard of (-1: none yet), under one condition."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._newest = -1
        self._closed = False

    @property
    def newest(self) -> int:
        """The newest version heard of so far (-1: none)."""
        return self._newest

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def heard(self, version: int) -> None:
        """Notes that ``version`` exists; wakes the waiters if it is newer than any so far."""
        with self._changed:
            if version > self._newest:
                self._newest = version
                self._changed.notify_all()

    def wait_newer(
        self, than: int | None, timeout: float | None, check_open: Callable[[], None]
    ) -> bool:
        """Waits until a version newer than ``than`` was heard of; False on timeout.

        Args:
            than: the version to beat (None: any version).
            timeout: seconds to wait at most (None: no limit).
            check_open: raises when the client is closed (called after every wake).
        """
        floor = -1 if than is None else than
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._newest <= floor:
                check_open()
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            check_open()
        return True

    def close(self) -> bool:
        """Marks the client closed and wakes every waiter; True the first time only."""
        with self._changed:
            if self._closed:
                return False
            self._closed = True
            self._changed.notify_all()
            return True
