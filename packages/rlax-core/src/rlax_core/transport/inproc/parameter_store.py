"""The in-process parameter store: versions held in host memory, shared by threads."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.errors import (
    ChecksumMismatchError,
    TransportClosedError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.tensors import tensor_checksum
from rlax_core.transport.fetching import fetch_destination, wanted_names
from rlax_core.transport.publishing import (
    PreparedVersion,
    check_version_number,
    prepare_version,
)
from rlax_core.types.policy import PolicyVersion

if TYPE_CHECKING:
    from rlax_core.transport.signing import VersionSigner


class _SharedVersions:
    """The versions all clients of one in-process store see, under one condition."""

    def __init__(self, keep_last: int) -> None:
        self.keep_last = keep_last
        self.changed = threading.Condition()
        self.versions: OrderedDict[int, tuple[PolicyVersion, dict[str, np.ndarray]]] = OrderedDict()
        self.newest_ever = -1


class InProcParameterStore(ParameterStore):
    """Keeps the last ``keep_last`` versions in memory.

    Publishing copies each array once (the caller may reuse or donate its buffers);
    fetching hands out read-only views of that copy, so any number of readers share one
    copy (zero-copy reads). Checksums are still verified on every fetch: memory can be
    corrupted, and the contract makes no exception for the embedded transport.

    Every thread may share one instance; :meth:`client` gives a separately closable
    handle on the same versions.

    Args:
        keep_last: how many versions to retain (at least 1).
        verify_checksums: verify tensor checksums on fetch (the contract requires it; turn
            off only to measure its cost).
        signer: signs every version published here (see :mod:`rlax_core.transport.signing`).
    """

    def __init__(
        self,
        keep_last: int = 2,
        *,
        verify_checksums: bool = True,
        signer: VersionSigner | None = None,
        _shared: _SharedVersions | None = None,
    ) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self._shared = _shared or _SharedVersions(keep_last)
        self._verify = verify_checksums
        self._signer = signer
        self._closed = False

    def client(self) -> InProcParameterStore:
        """Another client of the same versions; closing one client leaves the others open."""
        return InProcParameterStore(
            verify_checksums=self._verify, signer=self._signer, _shared=self._shared
        )

    def publish(
        self,
        version: int,
        params: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> PolicyVersion:
        self._check_open()
        check_version_number(version)
        self._check_new(version)  # before copying and hashing: a conflict costs nothing
        # Copy and hash outside the lock: readers of older versions are not held up. The
        # store keeps the arrays, so it owns them (the caller may reuse or donate its own).
        prepared = prepare_version(version, params, metadata, own=True, signer=self._signer)
        return self._commit(prepared)

    def adopt(
        self,
        version: int,
        arrays: Mapping[str, np.ndarray],
        metadata: Mapping[str, Any] | None = None,
        *,
        checksums: Mapping[str, str] | None = None,
    ) -> PolicyVersion:
        """Publishes arrays that the caller hands over for good, without copying them.

        For a parameter server that received a version into private buffers (or files
        mapped into memory): :meth:`publish` would copy them once more. The caller must
        never change the arrays afterwards.

        Args:
            version / arrays / metadata: as :meth:`publish`.
            checksums: the tensors' checksums, when the caller computed them from these
                very bytes (e.g. while receiving them); None computes them here.

        Raises:
            VersionConflictError, TypeError, ValueError: as :meth:`publish`.
        """
        self._check_open()
        return self._commit(prepare_version(version, arrays, metadata, checksums=checksums))

    def adopt_version(self, info: PolicyVersion, arrays: Mapping[str, np.ndarray]) -> PolicyVersion:
        """Publishes a version exactly as its publisher described it (its manifest kept
        whole, signature included), with arrays the caller hands over for good.

        For a parameter server that received a manifest and its tensors: readers get the
        publisher's manifest, which a re-made one (:meth:`adopt`) would not be. The
        caller has checked the manifest (:func:`~rlax_core.transport.manifests.check_manifest`)
        and the arrays against it.

        Raises:
            VersionConflictError: as :meth:`publish`.
            ValueError: the arrays are not exactly the manifest's tensors.
        """
        self._check_open()
        if list(arrays) != info.names:
            raise ValueError(
                f"version {info.version}: arrays {list(arrays)} are not its tensors {info.names}"
            )
        return self._commit(PreparedVersion(info, dict(arrays)))

    def newest_ever(self) -> int:
        """The highest version ever published to this store (-1: none)."""
        with self._shared.changed:
            return self._shared.newest_ever

    def _check_new(self, version: int) -> None:
        with self._shared.changed:
            if version <= self._shared.newest_ever:
                raise VersionConflictError(
                    f"cannot publish version {version}: version {self._shared.newest_ever} was "
                    "already published and versions are never reused"
                )

    def _commit(self, prepared: PreparedVersion) -> PolicyVersion:
        info, version = prepared.info, prepared.info.version
        with self._shared.changed:
            self._check_open()
            if version <= self._shared.newest_ever:  # another thread published meanwhile
                raise VersionConflictError(
                    f"cannot publish version {version}: version {self._shared.newest_ever} was "
                    "published concurrently"
                )
            self._shared.versions[version] = (info, prepared.arrays)
            self._shared.newest_ever = version
            while len(self._shared.versions) > self._shared.keep_last:
                self._shared.versions.popitem(last=False)
            self._shared.changed.notify_all()
        return info

    def latest(self) -> PolicyVersion | None:
        with self._shared.changed:
            self._check_open()
            if not self._shared.versions:
                return None
            return next(reversed(self._shared.versions.values()))[0]

    def versions(self) -> list[int]:
        with self._shared.changed:
            self._check_open()
            return list(self._shared.versions)

    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> FetchedParameters:
        with self._shared.changed:
            self._check_open()
            if version is None:
                if not self._shared.versions:
                    raise VersionNotFoundError("no policy version has been published yet")
                version = next(reversed(self._shared.versions))
            entry = self._shared.versions.get(version)
            if entry is None:
                raise VersionNotFoundError(
                    f"policy version {version} is not in the store (retained: "
                    f"{list(self._shared.versions) or 'none'})"
                )
        # Holding references keeps the arrays alive even if the version is evicted now.
        info, stored = entry
        if info.expected_checksum() != info.checksum:
            raise ChecksumMismatchError(f"the manifest of version {version} is corrupted")
        wanted = wanted_names(info, names)
        result: dict[str, np.ndarray] = {}
        for name in wanted:
            array = stored[name]
            digest = tensor_checksum(array, info.checksum_algorithm) if self._verify else None
            if digest is not None and digest != info.tensor(name).checksum:
                raise ChecksumMismatchError(
                    f"tensor {name!r} of version {version} does not match its checksum; "
                    "the stored bytes are corrupted"
                )
            if out is not None and name in out:
                result[name] = fetch_destination(info.tensor(name), out[name])
                np.copyto(result[name], array)
            else:
                view = array.view()
                view.flags.writeable = False
                result[name] = view
        return FetchedParameters(version=info, arrays=result)

    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        floor = -1 if than is None else than
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._shared.changed:
            while True:
                self._check_open()
                if self._shared.versions and next(reversed(self._shared.versions)) > floor:
                    return next(reversed(self._shared.versions.values()))[0]
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._shared.changed.wait(remaining)

    def close(self) -> None:
        with self._shared.changed:
            self._closed = True
            self._shared.changed.notify_all()

    def corrupt_for_test(self, version: int, name: str) -> None:
        """Flips one stored byte of a tensor, as a memory fault would (contract tests)."""
        with self._shared.changed:
            array = self._shared.versions[version][1][name]
        flat = array.reshape(-1).view(np.uint8)
        flat[flat.size // 2] ^= 0xFF

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError("the in-process parameter store is closed")
