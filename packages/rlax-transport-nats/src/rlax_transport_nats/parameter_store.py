"""The parameter store on JetStream: chunk messages first, the manifest last.

The layout (a data stream of chunks and a manifest stream, per namespace, both
immutable per version) is in :mod:`~rlax_transport_nats.param_streams`. A version is
visible once its manifest exists, and the manifest is written after every chunk is
stored, with ``Nats-Expected-Last-Sequence``, so two publishers cannot both win and a
version never goes back. Where the run signs its weights (``signing``), the trainer signs
each manifest and its tensors are hashed with BLAKE3.

Readers trust nothing they read: every manifest is checked before anything is allocated
(:mod:`~rlax_transport_nats.manifest_format`), chunks are fetched one at a time by
subject (direct get) straight into the destination arrays, and every tensor's checksum
is verified. ``latest()`` is the newest *valid* version: a manifest that is malformed,
or unsigned where the run signs, is skipped with a warning (and purged by the trainer's
next publish), so junk at a huge version neither crashes readers nor blocks the trainer.
Watchers subscribe to the announcements the manifest stream republishes: every client
hears of a new version at once, without polling.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import nats.js.errors
import numpy as np

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.errors import (
    ChecksumMismatchError,
    ConfigError,
    ForgedVersionError,
    ManifestError,
    TransportAuthError,
    TransportClosedError,
    TransportUnreachableError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.kit.transport import (
    IncomingChecksum,
    VersionWatch,
    fetch_destinations,
    prepare_version,
    verify_received,
    version_signer,
)
from rlax_core.types.policy import PolicyVersion
from rlax_transport_nats.bulk import BulkConnection, BulkUnavailableError, ChunkNotFoundError
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.manifest_format import MIN_CHUNK_BYTES, ManifestReader, StoredManifest
from rlax_transport_nats.param_streams import ParamStreams, chunk_count, manifest_version

logger = logging.getLogger(__name__)

# JetStream error code: the stream does not exist (memory streams do not outlive a
# server restart).
_STREAM_NOT_FOUND = 10059
T = TypeVar("T")
# Chunks of one publish in flight at once: enough to keep the server busy.
_PUBLISH_WINDOW = 4
# Direct gets in flight at once during a fetch (each lands in its own destination),
# and a cap on their bytes: replies queued for one client count against the server's
# max_pending (64 MiB by default), and 8 replies of 30 MiB stalled and then dropped a
# reader of a server that allows 256 MiB.
_FETCH_WINDOW = 4
_FETCH_IN_FLIGHT_BYTES = 32 << 20


class NatsParameterStore(ParameterStore):
    """Versioned weights on JetStream (see the module docstring for the layout).

    Args:
        connection: the NATS connection to use.
        config: the transport settings (namespace, retention, chunk size).
        owns_connection: close ``connection`` with the store.
    """

    def __init__(
        self,
        connection: NatsConnection,
        config: NatsTransportConfig,
        *,
        owns_connection: bool = False,
    ) -> None:
        self._conn = connection
        self._owns = owns_connection
        self._config = config
        self._streams = ParamStreams(connection, config)
        max_payload = connection.nc.max_payload
        self._chunk_bytes = min(config.chunk_mb << 20, max_payload)
        self._signer = version_signer(config.signing)
        self._reader = ManifestReader(config.signing, f"NATS at {connection.address}")
        self._rejected: set[int] = set()  # invalid versions already warned about
        self._heard = VersionWatch()  # the newest version heard of; the closed flag
        self._bulk_pool: list[BulkConnection] = []
        self._bulk_lock = threading.Lock()
        try:
            connection.call_retrying("creating the parameter streams", self._setup)
        except BaseException:
            if owns_connection:
                connection.close()
            raise
        connection.on_reconnect(self._after_reconnect)

    @property
    def connection(self) -> NatsConnection:
        """The NATS connection this store uses."""
        return self._conn

    @classmethod
    def open(cls, config: NatsTransportConfig) -> NatsParameterStore:
        """A store on a connection of its own (closed with the store)."""
        return cls(NatsConnection(config), config, owns_connection=True)

    # -- the contract --

    def publish(
        self,
        version: int,
        params: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> PolicyVersion:
        self._check_open()
        if not self._conn.auth.manages_streams:
            raise TransportAuthError(
                f"only the trainer publishes weights, and this client has "
                f"{self._conn.auth.describe()} (NATS at {self._conn.address} refuses it too)"
            )
        if self._chunk_bytes < MIN_CHUNK_BYTES:
            raise ConfigError(
                f"NATS at {self._conn.address} takes messages of at most {self._chunk_bytes} "
                f"bytes (max_payload); weight chunks need at least {MIN_CHUNK_BYTES}"
            )
        prepared = prepare_version(version, params, metadata, signer=self._signer)
        info, arrays = prepared.info, prepared.arrays
        upload = secrets.token_hex(6)
        manifest = StoredManifest(info, self._chunk_bytes, upload).encode()
        stored_at_once = info.nbytes * (self._config.keep_versions + 1)
        if stored_at_once > self._config.max_weights_gb * 1e9:
            raise ConfigError(
                f"version {version} is {info.nbytes / 1e9:.1f} GB and the store holds "
                f"keep_versions + 1 = {self._config.keep_versions + 1} versions at once "
                f"({stored_at_once / 1e9:.1f} GB), more than transport.max_weights_gb = "
                f"{self._config.max_weights_gb:g}: raise it (the server needs the room)"
            )
        newest, last_seq = self._call("reading the store", self._newest_and_sequence)
        if version <= newest:
            raise VersionConflictError(
                f"cannot publish version {version}: version {newest} was already "
                "published and versions are never reused"
            )
        chunks = []
        for index, array in enumerate(arrays.values()):
            data = memoryview(array.reshape(-1).view(np.uint8))
            for chunk in range(chunk_count(array.nbytes, self._chunk_bytes)):
                part = data[chunk * self._chunk_bytes : (chunk + 1) * self._chunk_bytes]
                chunks.append((self._streams.chunk_subject(version, upload, index, chunk), part))
        try:
            # Chunks go straight from the arrays to the socket; a retry re-sends them all
            # (a chunk stored already is refused as such: nothing is duplicated).
            self._with_bulk(
                f"publishing version {version}", lambda bulk: bulk.publish(chunks, _PUBLISH_WINDOW)
            )
            self._conn.call(
                self._streams.commit(info, manifest, last_seq),
                timeout=self._config.reconnect_timeout_s + 10,
            )
        except BaseException:
            with contextlib.suppress(Exception):  # a failed publish leaves no trace
                self._conn.call(
                    self._streams.purge(f"{version}.{upload}"),
                    timeout=self._config.connect_timeout_s,
                )
            raise
        with contextlib.suppress(Exception):  # committed; the next publish evicts again
            self._conn.call(self._streams.evict(version), timeout=self._config.reconnect_timeout_s)
        return info

    def latest(self) -> PolicyVersion | None:
        self._check_open()
        newest = self._call("reading the newest version", self._newest_valid)
        return None if newest is None else newest.info

    def versions(self) -> list[int]:
        self._check_open()
        return self._versions()

    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> FetchedParameters:
        self._check_open()
        if version is None:
            newest = self._call("reading the newest version", self._newest_valid)
            if newest is None:
                raise VersionNotFoundError(
                    f"no policy version has been published to NATS at {self._conn.address} "
                    f"(namespace {self._config.namespace!r})"
                )
            version = newest.info.version
        info, chunk_bytes, upload = self._manifest(version)
        index = {n: i for i, n in enumerate(info.names)}
        destinations = fetch_destinations(info, names, out)
        wanted = list(destinations)
        requests: list[tuple[str, memoryview]] = []
        owners: list[tuple[str, int]] = []
        for name in wanted:
            flat = memoryview(destinations[name].reshape(-1).view(np.uint8))
            nbytes = info.tensor(name).nbytes
            for chunk in range(chunk_count(nbytes, chunk_bytes)):
                start = chunk * chunk_bytes
                subject = self._streams.chunk_subject(version, upload, index[name], chunk)
                # Straight into the destination: no chunk is held anywhere else.
                requests.append((subject, flat[start : min(start + chunk_bytes, nbytes)]))
                owners.append((name, chunk))
        checksums: dict[str, IncomingChecksum] = {}

        def received(i: int) -> None:  # chunks mostly land in order: hashed as they land
            name, chunk = owners[i]
            checksums[name].add(chunk * chunk_bytes, requests[i][1])

        def fetch_all(bulk: BulkConnection) -> list[int]:
            algorithm = info.checksum_algorithm
            checksums.update({name: IncomingChecksum(algorithm) for name in wanted})  # per try
            window = max(1, min(_FETCH_WINDOW, _FETCH_IN_FLIGHT_BYTES // max(chunk_bytes, 1)))
            return bulk.fetch_many(self._streams.data_stream, requests, window, received)

        try:
            sizes = self._with_bulk(f"fetch of version {version}", fetch_all)
        except ChunkNotFoundError:
            raise VersionNotFoundError(
                f"policy version {version} was evicted while it was being read"
            ) from None
        for (name, chunk), (_, view), size in zip(owners, requests, sizes, strict=True):
            if size != len(view):
                raise ChecksumMismatchError(
                    f"chunk {chunk} of tensor {name!r} of version {version} holds {size} "
                    f"bytes, expected {len(view)} (truncated or damaged); fetch again"
                )
        verify_received(info, destinations, checksums, f"NATS at {self._conn.address}")
        return FetchedParameters(version=info, arrays=destinations)

    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        self._check_open()
        newest = self.latest()
        if newest is not None:
            self._heard.heard(newest.version)
        if not self._heard.wait_newer(than, timeout, self._check_open):
            return None
        return self.latest()

    def close(self) -> None:
        if not self._heard.close():
            return
        with self._bulk_lock:
            for bulk in self._bulk_pool:
                bulk.close()
            self._bulk_pool.clear()
        if self._owns:
            self._conn.close()

    # -- reading --

    def _versions(self) -> list[int]:
        return self._call("listing the policy versions", self._streams.versions)

    def manifest_of(self, version: int) -> tuple[PolicyVersion, int, str]:
        """The manifest of a version, its chunk size and the subject token of its upload.

        Raises:
            VersionNotFoundError: the version is not retained.
        """
        self._check_open()
        return self._manifest(version)

    def _manifest(self, version: int) -> tuple[PolicyVersion, int, str]:
        what = f"reading the manifest of version {version}"
        stored = self._call(what, lambda: self._read(version))
        return stored.info, stored.chunk_bytes, stored.upload

    async def _read(self, version: int) -> StoredManifest:
        """A version's manifest, checked (and signature-checked where the run signs).

        Raises:
            VersionNotFoundError: the version is not retained.
            ManifestError / ForgedVersionError: see :class:`ManifestReader`.
        """
        subject = self._streams.manifest_subject(version)
        try:
            message = await self._conn.js.get_msg(
                self._streams.manifest_stream, subject=subject, direct=True
            )
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code == _STREAM_NOT_FOUND:
                raise
            raise VersionNotFoundError(
                f"policy version {version} is not in the store at {self._conn.address} "
                f"(retained: {await self._streams.versions() or 'none'})"
            ) from None
        return self._reader.read(message.data or b"", version)

    async def _newest_valid(self) -> StoredManifest | None:
        """The newest retained version whose manifest passes every check."""
        return (await self._scan())[0]

    async def _scan(self) -> tuple[StoredManifest | None, list[int]]:
        """(the newest valid version, the invalid versions newer than it)."""
        invalid: list[int] = []
        for version in reversed(await self._streams.versions()):
            try:
                return await self._read(version), invalid
            except VersionNotFoundError:
                continue  # evicted meanwhile
            except (ManifestError, ForgedVersionError) as exc:
                invalid.append(version)
                if version not in self._rejected:
                    self._rejected.add(version)
                    logger.warning("skipping policy version %d: %s", version, exc)
        return None, invalid

    async def _newest_and_sequence(self) -> tuple[int, int]:
        """For a publish: the newest valid version (-1: none) and the sequence to expect.

        Invalid manifests newer than the newest valid one are purged first: only a client
        that should not write manifests can have put them there.
        """
        newest, invalid = await self._scan()
        for version in invalid:
            logger.warning("purging the invalid manifest of version %d", version)
            await self._streams.purge_manifest(version)
        return (-1 if newest is None else newest.info.version), await self._streams.last_sequence()

    def _with_bulk(self, what: str, work: Any) -> Any:
        """Runs ``work(bulk_connection)``, retrying on a fresh connection until the budget."""
        deadline = time.monotonic() + self._config.reconnect_timeout_s
        delay = 0.05
        while True:
            self._check_open()
            with self._bulk_lock:
                bulk = self._bulk_pool.pop() if self._bulk_pool else None
            try:
                if bulk is None:
                    bulk = BulkConnection(self._config)
                result = work(bulk)
            except (BulkUnavailableError, TransportUnreachableError) as exc:
                if bulk is not None:
                    bulk.close()
                if time.monotonic() + delay >= deadline:
                    raise TransportUnreachableError(
                        f"{what} on NATS at {self._conn.address} failed for "
                        f"{self._config.reconnect_timeout_s:.0f} s ({exc}); check that the "
                        "server runs and is reachable (reconnect_timeout_s)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            except BaseException:
                if bulk is not None:
                    bulk.close()  # its stream position is unknown now
                raise
            with self._bulk_lock:
                if self._heard.closed:
                    bulk.close()
                else:
                    self._bulk_pool.append(bulk)
            return result

    # -- setup and notifications --

    async def _setup(self) -> None:
        await self._streams.setup(self._on_manifest)

    async def _on_manifest(self, message: Any) -> None:
        """An announcement of a stored manifest: heard only once the manifest in the
        stream passes every check, so neither junk nor a fake announcement wakes a waiter."""
        version = manifest_version(message.subject)
        if version is None:
            return
        try:
            stored = await self._read(version)
        except Exception:  # invalid, evicted or unreachable: not news
            return
        self._heard.heard(stored.info.version)

    def _call(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """Runs a JetStream call across reconnections; recreates streams the server lost.

        A server restart empties memory storage of its streams too; the store makes them
        again, empty, so that readers see "no versions" until the trainer publishes.
        """

        async def attempt() -> T:
            try:
                return await make()
            except nats.js.errors.NotFoundError as exc:
                if exc.err_code != _STREAM_NOT_FOUND:
                    raise
                await self._setup()
                return await make()

        return self._conn.call_retrying(what, attempt)

    async def _after_reconnect(self) -> None:
        await self._setup()
        await self._catch_up()

    async def _catch_up(self) -> None:
        """After a reconnect: versions published while we were away wake waiters too."""
        newest = await self._newest_valid()
        if newest is not None:
            self._heard.heard(newest.info.version)

    def _check_open(self) -> None:
        if self._heard.closed:
            raise TransportClosedError(
                f"this client of the parameter store on NATS at {self._conn.address} is closed"
            )
