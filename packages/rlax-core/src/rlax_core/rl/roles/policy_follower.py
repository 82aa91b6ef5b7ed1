"""Which policy version an inference worker samples with, and when it pulls a newer one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import numpy as np

from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.errors import ForgedVersionError, VersionNotFoundError
from rlax_core.rl.roles.loop import POLL_S

log = logging.getLogger(__name__)


class PolicyFollower:
    """Follows the parameter store's newest version, ``pull_every`` versions at a time.

    A version the run did not sign (or an older one replayed) is reported, counted in
    :attr:`forged_versions` and never loaded: the worker samples on with the weights it
    holds, and takes the trainer's next signed version.

    Args:
        store: where versions are published.
        pull_every: pull once the store is this many versions ahead.
        load: takes a fetched version's arrays (name → array, never written to) and its
            number, and samples with them from then on.
    """

    def __init__(
        self,
        store: ParameterStore,
        pull_every: int,
        load: Callable[[Mapping[str, np.ndarray], int], None],
    ) -> None:
        self._store = store
        self._pull_every = pull_every
        self._load = load
        self.version: int | None = None
        self._newest: int | None = None  # the store's newest version at the last look
        self._looked_at: float | None = None
        self.forged_versions = 0

    def due(self, needed: int, max_age_s: float = 0.0) -> bool:
        """Whether the weights held are older than ``needed`` or ``pull_every`` behind.

        Args:
            max_age_s: the store's newest version may be taken from a look this recent
                (a look is a round trip to a networked store; a loop that asks every
                engine step passes a poll interval).
        """
        if self.version is None or self.version < needed:
            return True
        now = time.monotonic()
        if self._looked_at is None or now - self._looked_at >= max_age_s:
            self._looked_at = now
            try:
                latest = self._store.latest()
            except ForgedVersionError as exc:
                self._report(exc)
                return False  # nothing newer worth loading yet
            self._newest = None if latest is None else latest.version
        return self._newest is not None and self._newest - self.version >= self._pull_every

    def ensure(self, needed: int, stop: threading.Event | None = None) -> bool:
        """Pulls the newest version if :meth:`due`, waiting for one of at least ``needed``;
        False if ``stop`` was set while waiting."""
        if not self.due(needed):
            return True
        while True:
            try:
                latest = self._store.latest()
                while latest is None or latest.version < needed:
                    if stop is not None and stop.is_set():
                        return False
                    latest = self._store.wait_for_newer(needed - 1, timeout=POLL_S * 5)
                fetched = self._store.fetch(latest.version)
            except VersionNotFoundError:  # evicted meanwhile: a newer one exists
                continue
            except ForgedVersionError as exc:
                self._report(exc)
                if self.version is not None and self.version >= needed:
                    return True  # sample on with the weights held
                if stop is not None and stop.wait(POLL_S * 5):
                    return False
                if stop is None:
                    time.sleep(POLL_S * 5)
                continue
            self._load(fetched.arrays, latest.version)
            self.version = latest.version
            return True

    def _report(self, error: ForgedVersionError) -> None:
        self.forged_versions += 1
        log.warning("refused a policy version: %s (holding version %s)", error, self.version)
