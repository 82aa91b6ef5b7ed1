"""The two JetStream streams of a namespace's parameter store, and the writes to them.

Per namespace ``ns``:

* ``RLAX_<ns>_PARAM_DATA``: one message per chunk of raw tensor bytes on subject
  ``rlax.<ns>.params.data.<version>.<upload>.<tensor>.<chunk>``, where ``upload`` is
  random per publish call, so racing publishers never overwrite each other's chunks
  (one message per subject, so re-sending a chunk after a reconnect replaces it);
* ``RLAX_<ns>_PARAMS``: one JSON manifest per version on
  ``rlax.<ns>.params.manifest.<version>``, keeping the last ``keep_versions``.

The coroutines here run on the connection's event loop; the store
(:mod:`~rlax_transport_nats.parameter_store`) calls them across reconnections.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any

import nats.js.errors
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from rlax_core.errors import ConfigError, VersionConflictError
from rlax_core.types.policy import PolicyVersion
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection, api_error

# JetStream error code: Nats-Expected-Last-Sequence did not match (another publisher won).
_WRONG_LAST_SEQUENCE = 10071


class ParamStreams:
    """The data and manifest streams of one namespace (see the module docstring).

    Args:
        connection: the NATS connection.
        config: the transport settings (namespace, retention, weight storage).
    """

    def __init__(self, connection: NatsConnection, config: NatsTransportConfig) -> None:
        self._conn = connection
        self._config = config
        ns = config.namespace
        self.data_stream = f"RLAX_{ns}_PARAM_DATA"
        self.manifest_stream = f"RLAX_{ns}_PARAMS"
        self.data_prefix = f"rlax.{ns}.params.data"
        self.manifest_prefix = f"rlax.{ns}.params.manifest"
        self._subscription: Any = None

    def chunk_subject(self, version: int, upload: str, tensor: int, chunk: int) -> str:
        """The subject of one chunk of one tensor of one upload."""
        return f"{self.data_prefix}.{version}.{upload}.{tensor}.{chunk}"

    def manifest_subject(self, version: int) -> str:
        """The subject of a version's manifest."""
        return f"{self.manifest_prefix}.{version}"

    async def setup(self, on_manifest: Callable[[Any], Awaitable[None]]) -> None:
        """Creates the streams where they do not exist; subscribes ``on_manifest`` once."""
        js = self._conn.js
        storage = StorageType(self._config.weight_storage)
        await _ensure_stream(
            js,
            StreamConfig(
                name=self.data_stream,
                subjects=[f"{self.data_prefix}.>"],
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
                name=self.manifest_stream,
                subjects=[f"{self.manifest_prefix}.*"],
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
                f"{self.manifest_prefix}.*", cb=on_manifest
            )

    async def versions(self) -> list[int]:
        """The retained versions, oldest first."""
        info = await self._conn.js.stream_info(
            self.manifest_stream, subjects_filter=f"{self.manifest_prefix}.*"
        )
        subjects = info.state.subjects or {}
        return sorted(int(s.rsplit(".", 1)[1]) for s in subjects)

    async def manifest_state(self) -> tuple[int, int]:
        """(newest version, last sequence) of the manifest stream."""
        stream = await self._conn.js.stream_info(
            self.manifest_stream, subjects_filter=f"{self.manifest_prefix}.*"
        )
        versions = [int(s.rsplit(".", 1)[1]) for s in (stream.state.subjects or {})]
        return (max(versions) if versions else -1), stream.state.last_seq

    async def commit(self, info: PolicyVersion, manifest: bytes, last_seq: int) -> None:
        subject = f"{self.manifest_prefix}.{info.version}"
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

    async def purge(self, tokens: str) -> None:
        with contextlib.suppress(
            Exception
        ):  # best effort: unreferenced chunks are purged by later publishes
            await self._conn.js.purge_stream(
                self.data_stream, subject=f"{self.data_prefix}.{tokens}.>"
            )

    async def evict(self, published: int) -> None:
        """Purges the chunks of versions older than ``published`` whose manifest is gone."""
        manifests = await self._conn.js.stream_info(
            self.manifest_stream, subjects_filter=f"{self.manifest_prefix}.*"
        )
        retained = {int(s.rsplit(".", 1)[1]) for s in (manifests.state.subjects or {})}
        data = await self._conn.js.stream_info(
            self.data_stream, subjects_filter=f"{self.data_prefix}.*.*.0.0"
        )
        stored = {int(s.split(".")[-4]) for s in (data.state.subjects or {})}
        for version in sorted(stored - retained):
            if version < published:
                await self.purge(str(version))


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


def chunk_count(nbytes: int, chunk_bytes: int) -> int:
    # Every tensor has at least one chunk message (empty tensors an empty one), so
    # "<version>.<upload>.0.0" marks every version that has data in the stream.
    return max(1, math.ceil(nbytes / chunk_bytes))
