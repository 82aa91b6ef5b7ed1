"""The parameter store on JetStream: chunk messages first, the manifest last.

The layout (a data stream of chunks and a manifest stream, per namespace) is in
:mod:`~rlax_transport_nats.param_streams`. A version is visible once its manifest
exists, and the manifest is written after every chunk is stored, with
``Nats-Expected-Last-Sequence``, so two publishers cannot both win and a version never
goes back. Readers fetch chunks one at a time by subject
(direct get) straight into the destination arrays and verify every tensor's XXH3
checksum. Watchers subscribe to the manifest subjects: JetStream publishes are plain
NATS messages too, so every client hears of a new version at once, without polling.
"""

from __future__ import annotations

import contextlib
import json
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
)
from rlax_core.types.policy import PolicyVersion
from rlax_transport_nats.bulk import BulkConnection, BulkUnavailableError, ChunkNotFoundError
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.param_streams import ParamStreams, chunk_count

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
        prepared = prepare_version(version, params, metadata)
        info, arrays = prepared.info, prepared.arrays
        upload = secrets.token_hex(6)
        manifest = json.dumps(
            {
                "policy": json.loads(info.to_bytes()),
                "chunk_bytes": self._chunk_bytes,
                "upload": upload,
            }
        ).encode()
        newest, last_seq = self._call("reading the store", self._streams.manifest_state)
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
            # (one message per subject, so nothing is duplicated).
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
        versions = self._versions()
        return self._manifest(versions[-1])[0] if versions else None

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
            versions = self._versions()
            if not versions:
                raise VersionNotFoundError(
                    f"no policy version has been published to NATS at {self._conn.address} "
                    f"(namespace {self._config.namespace!r})"
                )
            version = versions[-1]
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
            checksums.update({name: IncomingChecksum() for name in wanted})  # per attempt
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
        versions = self._versions()
        if versions:
            self._heard.heard(versions[-1])
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
        subject = self._streams.manifest_subject(version)

        async def get() -> Any:
            return await self._conn.js.get_msg(
                self._streams.manifest_stream, subject=subject, direct=True
            )

        try:
            message = self._call(f"reading the manifest of version {version}", get)
        except nats.js.errors.NotFoundError:
            raise VersionNotFoundError(
                f"policy version {version} is not in the store at {self._conn.address} "
                f"(retained: {self._versions() or 'none'})"
            ) from None
        body = json.loads(message.data)
        info = PolicyVersion.model_validate(body["policy"])
        if info.expected_checksum() != info.checksum:
            raise ChecksumMismatchError(f"the manifest of version {version} is corrupted")
        return info, int(body["chunk_bytes"]), str(body["upload"])

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
        try:
            version = int(message.subject.rsplit(".", 1)[1])
        except ValueError:
            return
        self._heard.heard(version)

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
        newest, _ = await self._streams.manifest_state()
        self._heard.heard(newest)

    def _check_open(self) -> None:
        if self._heard.closed:
            raise TransportClosedError(
                f"this client of the parameter store on NATS at {self._conn.address} is closed"
            )
