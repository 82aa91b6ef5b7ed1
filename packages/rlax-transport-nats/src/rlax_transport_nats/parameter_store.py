"""The parameter store on JetStream: chunk messages first, the manifest last.

Layout, per namespace ``ns``:

* stream ``RLAX_<ns>_PARAM_DATA``: one message per chunk of raw tensor bytes on subject
  ``rlax.<ns>.params.data.<version>.<upload>.<tensor>.<chunk>``, where ``upload`` is
  random per publish call, so racing publishers never overwrite each other's chunks
  (one message per subject, so re-sending a chunk after a reconnect replaces it);
* stream ``RLAX_<ns>_PARAMS``: one JSON manifest per version on
  ``rlax.<ns>.params.manifest.<version>``, keeping the last ``keep_versions``.

A version is visible once its manifest exists, and the manifest is written after every
chunk is stored, with ``Nats-Expected-Last-Sequence``, so two publishers cannot both
win and a version never goes back. Readers fetch chunks one at a time by subject
(direct get) straight into the destination arrays and verify every tensor's XXH3
checksum. Watchers subscribe to the manifest subjects: JetStream publishes are plain
NATS messages too, so every client hears of a new version at once, without polling.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import nats.js.errors
import numpy as np
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.errors import (
    ChecksumMismatchError,
    ConfigError,
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
from rlax_transport_nats.connection import NatsConnection, api_error

# JetStream error codes: Nats-Expected-Last-Sequence did not match (another publisher
# won); the stream does not exist (memory streams do not outlive a server restart).
_WRONG_LAST_SEQUENCE = 10071
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
        ns = config.namespace
        self._data_stream = f"RLAX_{ns}_PARAM_DATA"
        self._manifest_stream = f"RLAX_{ns}_PARAMS"
        self._data_prefix = f"rlax.{ns}.params.data"
        self._manifest_prefix = f"rlax.{ns}.params.manifest"
        max_payload = connection.nc.max_payload
        self._chunk_bytes = min(config.chunk_mb << 20, max_payload)
        self._heard = VersionWatch()  # the newest version heard of; the closed flag
        self._subscription: Any = None
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
        newest, last_seq = self._call("reading the store", self._manifest_state)
        if version <= newest:
            raise VersionConflictError(
                f"cannot publish version {version}: version {newest} was already "
                "published and versions are never reused"
            )
        chunks = []
        for index, array in enumerate(arrays.values()):
            data = memoryview(array.reshape(-1).view(np.uint8))
            for chunk in range(_chunk_count(array.nbytes, self._chunk_bytes)):
                part = data[chunk * self._chunk_bytes : (chunk + 1) * self._chunk_bytes]
                chunks.append((f"{self._data_prefix}.{version}.{upload}.{index}.{chunk}", part))
        try:
            # Chunks go straight from the arrays to the socket; a retry re-sends them all
            # (one message per subject, so nothing is duplicated).
            self._with_bulk(
                f"publishing version {version}", lambda bulk: bulk.publish(chunks, _PUBLISH_WINDOW)
            )
            self._conn.call(
                self._commit(info, manifest, last_seq),
                timeout=self._config.reconnect_timeout_s + 10,
            )
        except BaseException:
            with contextlib.suppress(Exception):  # a failed publish leaves no trace
                self._conn.call(
                    self._purge_data(f"{version}.{upload}"), timeout=self._config.connect_timeout_s
                )
            raise
        with contextlib.suppress(Exception):  # committed; the next publish evicts again
            self._conn.call(self._evict(version), timeout=self._config.reconnect_timeout_s)
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
            for chunk in range(_chunk_count(nbytes, chunk_bytes)):
                start = chunk * chunk_bytes
                subject = f"{self._data_prefix}.{version}.{upload}.{index[name]}.{chunk}"
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
            return bulk.fetch_many(self._data_stream, requests, window, received)

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
        async def list_versions() -> list[int]:
            info = await self._conn.js.stream_info(
                self._manifest_stream, subjects_filter=f"{self._manifest_prefix}.*"
            )
            subjects = info.state.subjects or {}
            return sorted(int(s.rsplit(".", 1)[1]) for s in subjects)

        return self._call("listing the policy versions", list_versions)

    def manifest_of(self, version: int) -> tuple[PolicyVersion, int, str]:
        """The manifest of a version, its chunk size and the subject token of its upload.

        Raises:
            VersionNotFoundError: the version is not retained.
        """
        self._check_open()
        return self._manifest(version)

    def _manifest(self, version: int) -> tuple[PolicyVersion, int, str]:
        subject = f"{self._manifest_prefix}.{version}"

        async def get() -> Any:
            return await self._conn.js.get_msg(self._manifest_stream, subject=subject, direct=True)

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

    # -- writing (on the connection's loop) --

    async def _manifest_state(self) -> tuple[int, int]:
        """(newest version, last sequence) of the manifest stream."""
        stream = await self._conn.js.stream_info(
            self._manifest_stream, subjects_filter=f"{self._manifest_prefix}.*"
        )
        versions = [int(s.rsplit(".", 1)[1]) for s in (stream.state.subjects or {})]
        return (max(versions) if versions else -1), stream.state.last_seq

    async def _commit(self, info: PolicyVersion, manifest: bytes, last_seq: int) -> None:
        subject = f"{self._manifest_prefix}.{info.version}"
        headers = {
            "Nats-Expected-Last-Sequence": str(last_seq),
            "Nats-Msg-Id": f"manifest-{info.version}-{info.checksum}",
        }
        try:
            await self._conn.retrying(
                f"committing version {info.version}",
                lambda: self._conn.js.publish(subject, manifest, headers=headers),
            )
        except nats.js.errors.APIError as exc:
            if exc.err_code == _WRONG_LAST_SEQUENCE:
                raise VersionConflictError(
                    f"cannot publish version {info.version}: another publisher committed a "
                    "version meanwhile"
                ) from None
            raise api_error(f"committing version {info.version}", self._conn.address, exc) from exc

    async def _purge_data(self, tokens: str) -> None:
        with contextlib.suppress(
            Exception
        ):  # best effort: unreferenced chunks are purged by later publishes
            await self._conn.js.purge_stream(
                self._data_stream, subject=f"{self._data_prefix}.{tokens}.>"
            )

    async def _evict(self, published: int) -> None:
        """Purges the chunks of versions older than ``published`` whose manifest is gone."""
        manifests = await self._conn.js.stream_info(
            self._manifest_stream, subjects_filter=f"{self._manifest_prefix}.*"
        )
        retained = {int(s.rsplit(".", 1)[1]) for s in (manifests.state.subjects or {})}
        data = await self._conn.js.stream_info(
            self._data_stream, subjects_filter=f"{self._data_prefix}.*.*.0.0"
        )
        stored = {int(s.split(".")[-4]) for s in (data.state.subjects or {})}
        for version in sorted(stored - retained):
            if version < published:
                await self._purge_data(str(version))

    # -- setup and notifications --

    async def _setup(self) -> None:
        js = self._conn.js
        storage = StorageType(self._config.weight_storage)
        await _ensure_stream(
            js,
            StreamConfig(
                name=self._data_stream,
                subjects=[f"{self._data_prefix}.>"],
                storage=storage,
                max_msgs_per_subject=1,
                allow_direct=True,
                discard=DiscardPolicy.OLD,
            ),
            self._conn.address,
        )
        await _ensure_stream(
            js,
            StreamConfig(
                name=self._manifest_stream,
                subjects=[f"{self._manifest_prefix}.*"],
                storage=storage,
                max_msgs=self._config.keep_versions,
                max_msgs_per_subject=1,
                allow_direct=True,
                duplicate_window=120.0,
            ),
            self._conn.address,
        )
        if self._subscription is None:
            self._subscription = await self._conn.nc.subscribe(
                f"{self._manifest_prefix}.*", cb=self._on_manifest
            )

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
        newest, _ = await self._manifest_state()
        self._heard.heard(newest)

    def _check_open(self) -> None:
        if self._heard.closed:
            raise TransportClosedError(
                f"this client of the parameter store on NATS at {self._conn.address} is closed"
            )


async def _ensure_stream(js: Any, config: StreamConfig, address: str) -> None:
    try:
        info = await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        with contextlib.suppress(
            nats.js.errors.BadRequestError
        ):  # another client created it meanwhile
            await js.add_stream(config)
        return
    # JetStream cannot move a stream between file and memory storage.
    have, want = StorageType(info.config.storage or "file").value, config.storage.value
    if have != want:
        raise ConfigError(
            f"stream {config.name} on NATS at {address} keeps its messages in {have} storage, "
            f"but weight_storage is {want}: set weight_storage: {have}, use another "
            f"namespace, or delete the stream (nats stream rm {config.name})"
        )


def _chunk_count(nbytes: int, chunk_bytes: int) -> int:
    # Every tensor has at least one chunk message (empty tensors an empty one), so
    # "<version>.<upload>.0.0" marks every version that has data in the stream.
    return max(1, math.ceil(nbytes / chunk_bytes))
