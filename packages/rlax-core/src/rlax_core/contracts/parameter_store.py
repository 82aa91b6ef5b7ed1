"""The parameter store: versioned policy weights, published by the trainer, pulled by workers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlax_core.types.policy import PolicyVersion


@dataclass(frozen=True)
class FetchedParameters:
    """The result of a fetch: the manifest and the verified arrays.

    Attributes:
        version: the manifest of the whole version (all tensors, even if a subset was fetched).
        arrays: name → host array for the names fetched. Arrays may be read-only views
            shared with other readers; copy one before changing it.
    """

    version: PolicyVersion
    arrays: dict[str, np.ndarray]


class ParameterStore(ABC):
    """Versioned, checksummed storage of flat parameter sets.

    Guarantees every implementation gives (checked by
    :class:`rlax_core.testing.ParameterStoreContract`):

    * **Atomic versions.** A version becomes visible to :meth:`latest`, :meth:`fetch` and
      :meth:`wait_for_newer` only once all its tensors are stored. A publish that fails
      leaves no trace. Readers never observe a partially written version.
    * **Monotonic versions.** Version numbers strictly increase and are never reused;
      publishing a version not newer than the latest raises ``VersionConflictError``.
    * **Checksums.** Every tensor carries a checksum computed at publish and verified on
      fetch, and the manifest carries one over all tensors. A mismatch raises
      ``ChecksumMismatchError``; mismatching bytes are never returned.
    * **Retention.** The store keeps the newest ``keep_last`` versions (fixed when it is
      created); older ones raise ``VersionNotFoundError``. A fetch that races with the
      eviction of its version either completes or raises ``VersionNotFoundError``.
    * **Closing.** After :meth:`close`, every method raises ``TransportClosedError``,
      including a :meth:`wait_for_newer` blocked in another thread.

    Implementations are safe to use from several threads at once.
    """

    @abstractmethod
    def publish(
        self,
        version: int,
        params: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> PolicyVersion:
        """Stores a new version and makes it visible atomically.

        Args:
            version: the new version number; must be greater than :meth:`latest`.
            params: flat mapping of parameter name to NumPy or JAX array (at least one).
            metadata: JSON-serialisable facts about the version (step, run id, ...).

        Returns:
            The manifest of the published version.

        Raises:
            VersionConflictError: ``version`` is not newer than the latest version.
            TypeError, ValueError: a value is not an array of a supported dtype, or
                ``params`` is empty. Nothing is stored.
        """

    @abstractmethod
    def latest(self) -> PolicyVersion | None:
        """The manifest of the newest complete version, or None if none was published."""

    @abstractmethod
    def versions(self) -> list[int]:
        """Version numbers currently retained, oldest first."""

    @abstractmethod
    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> FetchedParameters:
        """Reads a version's arrays and verifies their checksums.

        Args:
            version: the version to read; None for the latest.
            names: the tensors to read (e.g. one shard's); None for all.
            out: optional destination arrays (C-contiguous, writable, of the published
                dtype and shape) for some or all of the names; the bytes are written
                there instead of into new arrays.

        Raises:
            VersionNotFoundError: no such version (never published, or evicted).
            KeyError: a requested name is not in the version.
            ValueError: an ``out`` array has the wrong dtype, shape or layout.
            ChecksumMismatchError: stored bytes do not match their checksum.
        """

    @abstractmethod
    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        """Blocks until a version newer than ``than`` exists.

        Args:
            than: a version number, or None to wait for any version.
            timeout: seconds to wait at most; None waits indefinitely.

        Returns:
            The newest version's manifest, or None if the timeout passed first.
        """

    @abstractmethod
    def close(self) -> None:
        """Releases the store's resources; idempotent."""

    def __enter__(self) -> ParameterStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
