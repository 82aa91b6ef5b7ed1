"""The two JetStream streams of a namespace's parameter store, and the writes to them.

Per namespace ``ns``:

* ``RLAX_<ns>_PARAM_DATA``: one message per chunk of raw tensor bytes on subject
  ``rlax.<ns>.params.data.<version>.<upload>.<tensor>.<chunk>``, where ``upload`` is
  random per publish call, so racing publishers never write each other's chunks;
* ``RLAX_<ns>_PARAMS``: one JSON manifest per version on
  ``rlax.<ns>.params.manifest.<version>``, announced by the stream (its headers
  republished once it is stored, without the publisher's reply subject) on
  ``rlax.<ns>.params.announce.<version>``, which readers subscribe to.

**Versions are immutable on the server.** Both streams keep one message per subject
and refuse a second one (discard new, per subject), so a version's manifest and chunks
can never be overwritten, by anyone: re-sending a chunk after a reconnect is refused as
already stored, and a second manifest for a version is a ``VersionConflictError``.
Messages cannot be deleted one by one (``deny_delete``); retention is the trainer's
purge of whole versions after each publish (``keep_versions``). ``max_weights_gb`` bounds
the data stream: a publish past it is refused instead of evicting retained versions.

Only the trainer (or a lab client, see :mod:`~rlax_transport_nats.auth`) creates the
streams and brings an older namespace's streams to these settings; other roles wait for
them. The coroutines here run on the connection's event loop; the store
(:mod:`~rlax_transport_nats.parameter_store`) calls them across reconnections.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any

import nats.js.errors
from nats.js.api import DiscardPolicy, RePublish, StorageType, StreamConfig

from rlax_core.errors import ConfigError, RlaxError, TransportError, VersionConflictError
from rlax_core.kit.transport import MAX_VERSION
from rlax_core.types.policy import PolicyVersion
from rlax_transport_nats import permissions
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection, api_error

# JetStream error code: Nats-Expected-Last-Sequence did not match (another publisher won).
_WRONG_LAST_SEQUENCE = 10071
# JetStream's refusal of a second message on a subject (discard new per subject).
ALREADY_STORED = "maximum messages per subject exceeded"
# The largest message either stream takes (nats-server's max_payload is at most this).
_MAX_MESSAGE_BYTES = 64 << 20
# Manifests the stream holds at most: keep_versions and whatever a publish adds before
# it purges; more is junk nobody should have written.
_MAX_MANIFESTS = 10_000
_MAX_MANIFEST_BYTES = 1 << 30
# Checking for streams that the trainer has not made yet.
_STREAM_POLL_S = 0.5
# JetStream error code: the server cannot reserve a stream's max_bytes.
_NO_STORAGE = 10047


class StreamMissingError(TransportError):
    """A stream this client may not create does not exist (yet)."""


class ParamStreams:
    """The data and manifest streams of one namespace (see the module docstring).

    Args:
        connection: the NATS connection.
        config: the transport settings (namespace, retention, weight storage, limits).
    """

    def __init__(self, connection: NatsConnection, config: NatsTransportConfig) -> None:
        self._conn = connection
        self._config = config
        ns = config.namespace
        self.data_stream = permissions.data_stream(ns)
        self.manifest_stream = permissions.manifest_stream(ns)
        self.data_prefix = f"rlax.{ns}.params.data"
        self.manifest_prefix = f"rlax.{ns}.params.manifest"
        self.announce_subject = permissions.announce_subject(ns)
        self._subscription: Any = None

    def chunk_subject(self, version: int, upload: str, tensor: int, chunk: int) -> str:
        """The subject of one chunk of one tensor of one upload."""
        return f"{self.data_prefix}.{version}.{upload}.{tensor}.{chunk}"

    def manifest_subject(self, version: int) -> str:
        """The subject of a version's manifest."""
        return f"{self.manifest_prefix}.{version}"

    def stream_configs(self) -> list[StreamConfig]:
        """The two streams as this client would create them."""
        storage = StorageType(self._config.weight_storage)
        immutable = {
            "storage": storage,
            "max_msgs_per_subject": 1,
            "discard": DiscardPolicy.NEW,
            "discard_new_per_subject": True,
            "deny_delete": True,
            "allow_direct": True,
            "max_msg_size": _MAX_MESSAGE_BYTES,
        }
        return [
            StreamConfig(
                name=self.data_stream,
                subjects=[f"{self.data_prefix}.>"],
                max_bytes=int(self._config.max_weights_gb * 1e9),
                **immutable,
            ),
            StreamConfig(
                name=self.manifest_stream,
                subjects=[f"{self.manifest_prefix}.*"],
                max_msgs=_MAX_MANIFESTS,
                max_bytes=_MAX_MANIFEST_BYTES,
                duplicate_window=120.0,
                republish=RePublish(
                    src=f"{self.manifest_prefix}.*",
                    dest=self.announce_subject.replace("*", "{{wildcard(1)}}"),
                    headers_only=True,  # a hint: readers read the manifest from the stream
                ),
                **immutable,
            ),
        ]

    async def setup(self, on_manifest: Callable[[Any], Awaitable[None]]) -> None:
        """Makes sure the streams exist (creating or updating them, where this client
        manages streams; else waiting for them) and subscribes ``on_manifest`` once.

        Raises:
            StreamMissingError: a stream was still missing after ``reconnect_timeout_s``.
        """
        for config in self.stream_configs():
            await ensure_stream(self._conn, config)
        if self._subscription is None:
            self._subscription = await self._conn.nc.subscribe(
                self.announce_subject, cb=on_manifest
            )

    async def versions(self) -> list[int]:
        """The retained versions, oldest first (subjects that name no version are left out)."""
        info = await self._conn.js.stream_info(
            self.manifest_stream, subjects_filter=f"{self.manifest_prefix}.*"
        )
        named = (manifest_version(s) for s in (info.state.subjects or {}))
        return sorted(v for v in named if v is not None)

    async def last_sequence(self) -> int:
        """The manifest stream's last sequence (what the next commit expects)."""
        return (await self._conn.js.stream_info(self.manifest_stream)).state.last_seq

    async def commit(self, info: PolicyVersion, manifest: bytes, last_seq: int) -> None:
        """Writes a version's manifest, if nothing was committed since ``last_seq``.

        Raises:
            VersionConflictError: another publisher committed meanwhile, or the version
                already has a manifest.
        """
        subject = self.manifest_subject(info.version)
        headers = {
            "Nats-Expected-Last-Sequence": str(last_seq),
            "Nats-Msg-Id": f"manifest-{info.version}-{info.checksum}",
        }

        async def publish() -> Any:
            try:
                return await self._conn.js.publish(subject, manifest, headers=headers)
            except nats.js.errors.APIError as exc:  # 503 is retryable, but not this one
                if ALREADY_STORED in str(exc.description):
                    raise VersionConflictError(
                        f"cannot publish version {info.version}: it has a manifest already "
                        "and versions are never overwritten"
                    ) from None
                raise

        try:
            await self._conn.retrying(f"committing version {info.version}", publish)
        except nats.js.errors.APIError as exc:
            if exc.err_code == _WRONG_LAST_SEQUENCE:
                raise VersionConflictError(
                    f"cannot publish version {info.version}: another publisher committed a "
                    "version meanwhile"
                ) from None
            raise api_error(f"committing version {info.version}", self._conn.address, exc) from exc

    async def purge(self, tokens: str) -> None:
        """Purges the chunks under ``data.<tokens>.>`` (best effort)."""
        with contextlib.suppress(Exception):  # unreferenced chunks go with later publishes
            await self._conn.js.purge_stream(
                self.data_stream, subject=f"{self.data_prefix}.{tokens}.>"
            )

    async def purge_manifest(self, version: int) -> None:
        """Removes one version's manifest (best effort): junk, or a version retired."""
        with contextlib.suppress(Exception):
            await self._conn.js.purge_stream(
                self.manifest_stream, subject=self.manifest_subject(version)
            )

    async def evict(self, published: int) -> None:
        """Keeps the newest ``keep_versions`` manifests, then purges the chunks of versions
        older than ``published`` whose manifest is gone."""
        await self._conn.js.purge_stream(
            self.manifest_stream,
            subject=f"{self.manifest_prefix}.*",
            keep=self._config.keep_versions,
        )
        retained = set(await self.versions())
        data = await self._conn.js.stream_info(
            self.data_stream, subjects_filter=f"{self.data_prefix}.*.*.0.0"
        )
        stored = {int(s.split(".")[-4]) for s in (data.state.subjects or {})}
        for version in sorted(stored - retained):
            if version < published:
                await self.purge(str(version))


async def ensure_stream(connection: NatsConnection, config: StreamConfig) -> None:
    """Makes sure a stream exists with ``config``'s limits.

    A client that manages streams creates a missing one and updates one whose limits
    differ (an older namespace); any other client waits up to ``reconnect_timeout_s``
    for it.

    Raises:
        ConfigError: the stream keeps its messages in the other storage.
        StreamMissingError: it is still missing at the end of the wait.
    """
    js, address = connection.js, connection.address
    deadline = connection.loop.time() + connection.config.reconnect_timeout_s
    while True:
        try:
            info = await js.stream_info(config.name)
            break
        except nats.js.errors.NotFoundError:
            if connection.auth.manages_streams:
                try:
                    await js.add_stream(config)
                except nats.js.errors.BadRequestError:
                    pass  # made by another client meanwhile
                except nats.js.errors.APIError as exc:
                    raise _stream_error(config, address, exc) from None
                return
            if connection.loop.time() >= deadline:
                raise StreamMissingError(
                    f"stream {config.name} does not exist on NATS at {address}, and "
                    f"{connection.auth.describe()} may not create it: the trainer or `rlax "
                    "serve param-server` does; start one of them (waited "
                    f"{connection.config.reconnect_timeout_s:.0f} s, reconnect_timeout_s)"
                ) from None
            await asyncio.sleep(_STREAM_POLL_S)
    # JetStream cannot move a stream between file and memory storage.
    have, want = StorageType(info.config.storage or "file").value, config.storage.value
    if have != want:
        raise ConfigError(
            f"stream {config.name} on NATS at {address} keeps its messages in {have} storage, "
            f"but weight_storage is {want}: set weight_storage: {have}, use another "
            f"namespace, or delete the stream (nats stream rm {config.name})"
        )
    if connection.auth.manages_streams and _differs(info.config, config):
        try:
            await js.update_stream(config)
        except nats.js.errors.APIError as exc:
            raise _stream_error(config, address, exc) from None


def _stream_error(config: StreamConfig, address: str, exc: Exception) -> RlaxError:
    if getattr(exc, "err_code", None) == _NO_STORAGE:
        size = (config.max_bytes or 0) / 1e9
        return ConfigError(
            f"NATS at {address} cannot reserve {size:g} GB for stream {config.name} "
            f"({getattr(exc, 'description', exc)}): lower transport.max_weights_gb or "
            "max_queue_gb, or give the server a larger store (jetstream max_file_store or "
            "max_memory_store)"
        )
    return api_error(f"creating or updating stream {config.name}", address, exc)


def _differs(have: StreamConfig, want: StreamConfig) -> bool:
    """Whether a stream's limits or safety settings differ from ``want``'s."""
    fields = [
        "max_msgs",
        "max_bytes",
        "max_msg_size",
        "max_msgs_per_subject",
        "max_consumers",
        "discard",
        "discard_new_per_subject",
        "deny_delete",
        "republish",
    ]
    for name in fields:
        wanted = getattr(want, name)
        if wanted is not None and getattr(have, name) != wanted:
            return True
    return False


def manifest_version(subject: str) -> int | None:
    """The version a manifest (or announcement) subject names, or None for a token that is
    not one."""
    token = subject.rsplit(".", 1)[-1]
    if not (token.isascii() and token.isdigit()) or len(token) > 16 or token != str(int(token)):
        return None  # junk, or a leading zero: no version's manifest is there
    version = int(token)
    return version if version <= MAX_VERSION else None


def chunk_count(nbytes: int, chunk_bytes: int) -> int:
    """The chunk messages of a tensor of ``nbytes`` (at least one)."""
    # Every tensor has at least one chunk message (empty tensors an empty one), so
    # "<version>.<upload>.0.0" marks every version that has data in the stream.
    return max(1, math.ceil(nbytes / chunk_bytes))
