"""The parameter store client of the gRPC transport.

Publish streams the manifest and then every chunk in one client-streaming call; the
server makes the version visible only when the stream ended and every checksum
matched. Fetch reads the manifest, then receives the bytes straight into the
destination arrays over the server's bulk port (bulk.py: nothing held beyond them), or,
where that port cannot be used, streams them as chunks through gRPC (a chunk or two
held beyond them); either way each tensor's checksum is verified end to end, hashing
the bytes as they arrive. Version watching is one server stream per client, opened on
the first wait and re-opened after a reconnect (a server holding as many waiting calls
as it allows refuses it: the client then polls the newest manifest until it can watch
again).

Every manifest from the server goes through ``parse_manifest`` before it is used, and
a run that signs its weights (``signing``) publishes signed versions; readers verify
them through :class:`~rlax_core.kit.transport.LazyTransport`.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import grpc
import numpy as np

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.errors import (
    ChecksumMismatchError,
    RlaxError,
    TransportClosedError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.kit.transport import (
    IncomingChecksum,
    VersionWatch,
    fetch_destinations,
    parse_manifest,
    prepare_version,
    verify_received,
    version_signer,
)
from rlax_core.types.policy import PolicyVersion
from rlax_transport_grpc import bulk, wire
from rlax_transport_grpc.channel import GrpcChannel, chunk_frames
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.limits import ServerBusyError
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb

_BULK_RETRY_S = 300.0  # after a bulk fetch failed, stream for this long
_POLL_WHILE_BUSY_S = 1.0  # how often a client the server cannot watch for asks instead
_POLLS_BEFORE_WATCHING = 15  # then it tries to watch again


class GrpcParameterStore(ParameterStore):
    """A client of the parameter server's versioned store.

    Args:
        channel: the channel to the server.
        owns_channel: close the channel with the store.
    """

    def __init__(self, channel: GrpcChannel, *, owns_channel: bool = False) -> None:
        self._ch = channel
        self._owns = owns_channel
        self._signer = version_signer(channel.config.signing)
        self._source = f"the gRPC parameter server at {channel.address}"
        self._chunk_bytes = channel.config.chunk_mb << 20
        self._heard = VersionWatch()  # the newest version heard of; the closed flag
        self._watch: Any = None
        self._watcher: threading.Thread | None = None
        self._watcher_lock = threading.Lock()
        self._bulk_retry_at = 0.0  # monotonic time before which fetches stream
        self.fetch_route: str | None = None  # "bulk" or "stream": how the last fetch came

    @classmethod
    def open(cls, config: GrpcTransportConfig) -> GrpcParameterStore:
        """A store on a channel of its own (closed with the store)."""
        return cls(GrpcChannel(config), owns_channel=True)

    def publish(
        self,
        version: int,
        params: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> PolicyVersion:
        self._check_open()
        prepared = prepare_version(version, params, metadata, signer=self._signer)
        info = prepared.info
        views = [memoryview(a.reshape(-1).view(np.uint8)) for a in prepared.arrays.values()]

        def frames() -> Iterator[bytes]:
            yield wire.encode_manifest_frame(info.to_bytes())
            for index, data in enumerate(views):
                for tensor, start, end in chunk_frames(index, data, self._chunk_bytes):
                    yield wire.encode_publish_chunk(tensor, start, data[start:end])

        attempts = [0]

        def attempt(timeout: float) -> pb.Manifest:
            attempts[0] += 1
            # No deadline: its length scales with the bytes; keep-alives catch a dead server.
            return self._ch.publish_frames(frames(), **self._ch.kw(None))

        try:
            self._ch.call(f"publish of version {version}", attempt)
        except VersionConflictError:
            # A retry after a lost reply finds its own first attempt committed.
            latest = self.latest() if attempts[0] > 1 else None
            if latest is None or latest.version != version or latest.checksum != info.checksum:
                raise
        return info

    def latest(self) -> PolicyVersion | None:
        self._check_open()
        reply = self._ch.call(
            "reading the latest version",
            lambda t: self._ch.params.GetManifest(pb.VersionRequest(version=-1), **self._ch.kw(t)),
        )
        return parse_manifest(reply.policy_json, self._source) if reply.policy_json else None

    def versions(self) -> list[int]:
        self._check_open()
        reply = self._ch.call(
            "listing versions", lambda t: self._ch.params.ListVersions(pb.Empty(), **self._ch.kw(t))
        )
        return list(reply.versions)

    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> FetchedParameters:
        self._check_open()
        info = self._manifest(version)
        destinations = fetch_destinations(info, names, out)
        request = pb.FetchRequest(version=info.version, names=list(destinations))

        checksums: dict[str, IncomingChecksum] = {}

        def attempt(timeout: float) -> None:
            received = dict.fromkeys(range(len(info.tensors)), 0)
            flats = {
                info.names.index(n): memoryview(a.reshape(-1).view(np.uint8))
                for n, a in destinations.items()
            }
            # Chunks come in order, so each tensor is hashed as it arrives (IncomingChecksum).
            checksums.update(
                {name: IncomingChecksum(info.checksum_algorithm) for name in destinations}
            )
            for frame in self._ch.fetch_frames(request, **self._ch.kw(None)):
                tensor, offset, data = wire.decode_chunk(frame)
                flat = flats.get(tensor)
                if flat is None or offset + len(data) > len(flat):
                    raise ChecksumMismatchError(
                        f"a chunk of version {info.version} does not fit tensor #{tensor}; "
                        "the stream is corrupted, fetch again"
                    )
                flat[offset : offset + len(data)] = data
                checksums[info.names[tensor]].add(offset, data)
                received[tensor] += len(data)
                del frame, data  # at most one chunk is held beyond the destinations
            short = [info.tensors[i].name for i in flats if received[i] != len(flats[i])]
            if short:
                raise ChecksumMismatchError(
                    f"tensors {short} of version {info.version} arrived truncated from "
                    f"{self._ch.address}; fetch again"
                )

        if self._fetch_over_bulk(request, info, destinations, checksums):
            self.fetch_route = "bulk"
        else:
            self._ch.call(f"fetch of version {info.version}", attempt)
            self.fetch_route = "stream"
        source = f"the parameter server at {self._ch.address}"
        verify_received(info, destinations, checksums, source)
        return FetchedParameters(version=info, arrays=destinations)

    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        self._check_open()
        self._ensure_watching()
        latest = self.latest()
        if latest is not None:
            self._heard.heard(latest.version)
        if not self._heard.wait_newer(than, timeout, self._check_open):
            return None
        return self.latest()

    def close(self) -> None:
        if not self._heard.close():
            return
        if self._watch is not None:
            self._watch.cancel()
        if self._owns:
            self._ch.close()

    # -- internals --

    def _manifest(self, version: int | None) -> PolicyVersion:
        request = pb.VersionRequest(version=-1 if version is None else version)
        reply = self._ch.call(
            f"reading the manifest of version {version}",
            lambda t: self._ch.params.GetManifest(request, **self._ch.kw(t)),
        )
        if not reply.policy_json:
            raise VersionNotFoundError(
                f"no policy version has been published to the parameter server at "
                f"{self._ch.address} (namespace {self._ch.config.namespace!r})"
            )
        return parse_manifest(reply.policy_json, self._source)  # ManifestError: corrupted

    def _fetch_over_bulk(
        self,
        request: pb.FetchRequest,
        info: PolicyVersion,
        destinations: dict[str, np.ndarray],
        checksums: dict[str, IncomingChecksum],
    ) -> bool:
        """Fetches over the server's bulk port (see bulk.py); False to stream instead.

        Any failure here (no port, a refused ticket, a connection that broke) leaves the
        fetch to the gRPC stream, which retries and reports errors the usual way. After a
        failure the port is left alone for a while, so an unreachable one costs little.
        """
        if not self._ch.config.bulk_fetch or time.monotonic() < self._bulk_retry_at:
            return False
        try:
            reply = self._ch.params.OpenBulkFetch(
                request, **self._ch.kw(self._ch.config.connect_timeout_s)
            )
        except grpc.RpcError:
            return False
        if not reply.port:
            return False
        flats = [memoryview(a.reshape(-1).view(np.uint8)) for a in destinations.values()]
        checksums.update({name: IncomingChecksum(info.checksum_algorithm) for name in destinations})
        host = self._ch.address.rsplit(":", 1)[0]
        try:
            bulk.receive((host, reply.port), self._ch.credential, reply.ticket, flats,
                         list(checksums.values()), self._bulk_tls, host,
                         self._ch.config.reconnect_timeout_s)  # fmt: skip
        except OSError:  # ConnectionError and ssl.SSLError are OSErrors
            self._bulk_retry_at = time.monotonic() + _BULK_RETRY_S
            return False
        return True

    @functools.cached_property
    def _bulk_tls(self) -> ssl.SSLContext | None:
        """The bulk connection's TLS context (built once: it reads the CA file, and the
        client certificate for mutual TLS)."""
        config = self._ch.config
        if config.tls_ca_file is None:
            return None
        context = ssl.create_default_context(cafile=str(config.tls_ca_file))
        if config.tls_cert_file is not None and config.tls_key_file is not None:
            context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        return context

    def _ensure_watching(self) -> None:
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch_loop, name="rlax-grpc-watch", daemon=True
                )
                self._watcher.start()

    def _watch_loop(self) -> None:
        """Follows the server's version stream; re-opens it after a disconnect."""
        while not self._heard.closed:
            try:
                self._watch = self._ch.params.WatchVersions(
                    pb.VersionRequest(version=self._heard.newest), metadata=self._ch.metadata
                )
                for manifest in self._watch:
                    self._heard.heard(parse_manifest(manifest.policy_json, self._source).version)
            except grpc.RpcError as exc:
                if isinstance(self._ch.translate(exc, "watching versions"), ServerBusyError):
                    self._poll_newest()
            except (RlaxError, ValueError):
                pass
            if not self._heard.closed:
                time.sleep(0.2)  # the server is restarting: try again shortly

    def _poll_newest(self) -> None:
        """Asks for the newest version now and then, while the server cannot watch for us."""
        for _ in range(_POLLS_BEFORE_WATCHING):
            if self._heard.closed:
                return
            try:
                latest = self.latest()
            except RlaxError:
                return
            if latest is not None:
                self._heard.heard(latest.version)
            time.sleep(_POLL_WHILE_BUSY_S)

    def _check_open(self) -> None:
        if self._heard.closed:
            raise TransportClosedError(
                f"this client of the parameter server at {self._ch.address} is closed"
            )
        self._ch.check_open()


__all__ = ["GrpcParameterStore"]
