"""The gRPC parameter server's handlers, over rlax-core's in-process store and queues.

The server's state is the same machinery the embedded transport uses, from core's
transport kit: an :class:`~rlax_core.kit.transport.InProcParameterStore` (versions,
retention, atomic visibility, waiting) holding memory maps of the version files, and a
:class:`~rlax_core.kit.transport.LeaseTable` per queue (leases, de-duplication, dead
letters) recording its changes in a file journal. Each namespace has its own store and
queues.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from rlax_core.contracts.parameter_store import FetchedParameters
from rlax_core.errors import LeaseExpiredError, TransportClosedError, VersionNotFoundError
from rlax_core.kit.transport import InProcParameterStore, InProcQueue, LeaseTable
from rlax_core.types.lease import Lease
from rlax_core.types.policy import PolicyVersion
from rlax_transport_grpc import wire
from rlax_transport_grpc.bulk import BulkSender
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.queue_journal import FileQueueJournal
from rlax_transport_grpc.versions_on_disk import (
    Upload,
    committed_versions,
    damaged_tensors,
    map_version,
    remove_versions,
)

NAMESPACE_KEY = "rlax-namespace"


class Namespace:
    """The store and queues of one namespace, with its versions in ``folder``."""

    def __init__(self, folder: Path, config: GrpcTransportConfig) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config = config
        # Clients verify every tensor end to end; the server verifies uploads only.
        self.store = InProcParameterStore(keep_last=config.keep_versions, verify_checksums=False)
        self.queues: dict[str, InProcQueue] = {}
        self.lock = threading.Lock()
        for version, path, manifest in committed_versions(folder)[-config.keep_versions :]:
            damaged = damaged_tensors(path, manifest)
            if damaged:  # e.g. a disk filled up: serving it would only fail every reader
                print(
                    f"rlax: version {version} in {path} is damaged ({damaged} have the wrong "
                    "size); it is dropped",
                    file=sys.stderr,
                )
                continue
            self.store.adopt(version, map_version(path, manifest), manifest.metadata)
        remove_versions(folder, set(self.store.versions()))

    def queue(self, name: str, max_deliveries: int | None = None) -> InProcQueue:
        """The named queue, restored from its journal the first time it is used."""
        with self.lock:
            if name not in self.queues:
                if not name or not name.replace("-", "").replace("_", "").isalnum():
                    raise ValueError(f"queue names use letters, digits, '-' and '_'; got {name!r}")
                folder = self.folder / "queues"
                folder.mkdir(exist_ok=True)
                settings = folder / f"{name}.json"
                if settings.exists():  # the setting it was created with, before a restart
                    max_deliveries = json.loads(settings.read_text())["max_deliveries"]
                else:
                    max_deliveries = max_deliveries or self.config.max_deliveries
                    settings.write_text(json.dumps({"max_deliveries": max_deliveries}))
                journal = FileQueueJournal(folder / f"{name}.journal", max_deliveries)
                table = LeaseTable(
                    name,
                    dedupe_window_s=self.config.dedupe_window_s,
                    max_deliveries=max_deliveries,
                    journal=journal,
                )
                table.restore(*journal.state())
                self.queues[name] = InProcQueue.of(table)
            return self.queues[name]


class TransportService:
    """Every RPC of rlax_transport.proto, as plain functions of (request, context)."""

    def __init__(self, state_dir: Path, config: GrpcTransportConfig) -> None:
        self.state_dir = state_dir
        self.config = config
        self._namespaces: dict[str, Namespace] = {}
        self._lock = threading.Lock()
        self.bulk: BulkSender | None = None  # set by the server when it has a bulk port

    def namespace(self, context: grpc.ServicerContext) -> Namespace:
        name = dict(context.invocation_metadata()).get(NAMESPACE_KEY, "rlax")
        if not name.replace("-", "").replace("_", "").isalnum():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad namespace {name!r}")
        with self._lock:
            if name not in self._namespaces:
                self._namespaces[name] = Namespace(self.state_dir / name, self.config)
            return self._namespaces[name]

    def close(self) -> None:
        with self._lock:
            for namespace in self._namespaces.values():
                namespace.store.close()

    # -- parameter server --

    def ping(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.ServerInfo:
        self.namespace(context)
        return pb.ServerInfo(
            keep_versions=self.config.keep_versions,
            max_message_bytes=self.config.max_message_bytes,
        )

    def publish(self, frames: Iterator[Any], context: grpc.ServicerContext) -> pb.Manifest:
        space = self.namespace(context)
        first = next(frames, None)
        if not isinstance(first, pb.Manifest):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a publish starts with its manifest")
        announced = PolicyVersion.from_bytes(first.policy_json)
        newest = space.store.newest_ever()
        if announced.version <= newest:
            context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"cannot publish version {announced.version}: version {newest} was already "
                "published and versions are never reused",
            )
        upload = Upload(space.folder, announced)
        try:
            for frame in frames:
                if isinstance(frame, pb.Manifest):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a second manifest frame")
                upload.write(*frame)
            missing = upload.missing()
            if missing:
                context.abort(grpc.StatusCode.DATA_LOSS, f"tensors {missing} arrived incomplete")
            with space.lock:  # one commit at a time: numbers are checked and taken together
                if announced.version <= space.store.newest_ever():
                    context.abort(
                        grpc.StatusCode.ALREADY_EXISTS,
                        f"cannot publish version {announced.version}: a newer or equal version "
                        "was committed meanwhile",
                    )
                final = upload.commit(space.folder, announced)
                arrays = map_version(final, announced)
                digests = upload.checksums(arrays)
                bad = [t.name for t in announced.tensors if digests[t.name] != t.checksum]
                if bad or announced.expected_checksum() != announced.checksum:
                    del arrays
                    remove_versions(space.folder, set(space.store.versions()))
                    context.abort(
                        grpc.StatusCode.DATA_LOSS,
                        f"tensors {bad or 'manifest'} of version {announced.version} do not "
                        "match their checksums after the upload; publish again",
                    )
                info = space.store.adopt(
                    announced.version, arrays, announced.metadata, checksums=digests
                )
        except BaseException:
            upload.discard()
            raise
        remove_versions(space.folder, set(space.store.versions()))
        return pb.Manifest(policy_json=info.to_bytes())

    def get_manifest(
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> pb.Manifest:
        store = self.namespace(context).store
        if request.version < 0:
            latest = store.latest()
            return pb.Manifest(policy_json=latest.to_bytes() if latest else b"")
        try:
            return pb.Manifest(
                policy_json=store.fetch(request.version, names=[]).version.to_bytes()
            )
        except VersionNotFoundError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))

    def list_versions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.VersionList:
        return pb.VersionList(versions=self.namespace(context).store.versions())

    def fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[bytes]:
        fetched = self._fetched(request, context)
        chunk = self.config.chunk_mb << 20
        index = {name: i for i, name in enumerate(fetched.version.names)}
        for name, array in fetched.arrays.items():
            data = memoryview(array.reshape(-1).view("uint8"))
            for start in range(0, max(len(data), 1), chunk):
                yield wire.encode_chunk(index[name], start, data[start : start + chunk])

    def open_bulk_fetch(
        self, request: pb.FetchRequest, context: grpc.ServicerContext
    ) -> pb.BulkTicket:
        if self.bulk is None:
            return pb.BulkTicket(port=0)
        fetched = self._fetched(request, context)
        ticket = self.bulk.issue(list(fetched.arrays.values()))
        return pb.BulkTicket(ticket=ticket, port=self.bulk.port)

    def _fetched(
        self, request: pb.FetchRequest, context: grpc.ServicerContext
    ) -> FetchedParameters:
        """The requested tensors (in the request's order), or the call aborted."""
        store = self.namespace(context).store
        try:
            return store.fetch(request.version, names=list(request.names) or None)
        except VersionNotFoundError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except KeyError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise AssertionError("context.abort raises")

    def watch_versions(
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Manifest]:
        watcher = self.namespace(context).store.client()
        context.add_callback(watcher.close)  # the client went away: stop waiting
        than = request.version if request.version >= 0 else None
        try:
            while context.is_active():
                newest = watcher.wait_for_newer(than, timeout=None)
                if newest is not None:
                    than = newest.version
                    yield pb.Manifest(policy_json=newest.to_bytes())
        except TransportClosedError:
            return

    # -- queues --

    def open_queue(self, request: pb.OpenQueueRequest, context: grpc.ServicerContext) -> pb.Empty:
        self.namespace(context).queue(request.queue, request.max_deliveries or None)
        return pb.Empty()

    def put(self, request: pb.PutRequest, context: grpc.ServicerContext) -> pb.PutReply:
        queue = self.namespace(context).queue(request.queue)
        return pb.PutReply(added=queue.put(request.item_id, request.payload))

    def get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> pb.LeaseReply:
        if request.lease_s <= 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "lease_s must be positive")
        consumer = self.namespace(context).queue(request.queue).client()
        context.add_callback(consumer.close)  # a cancelled call leases nothing
        try:
            lease = consumer.get(request.lease_s, timeout=max(0.0, request.timeout_s))
        except TransportClosedError:
            return pb.LeaseReply(found=False)
        if lease is None:
            return pb.LeaseReply(found=False)
        return _lease_reply(lease)

    def ack(self, request: pb.LeaseRef, context: grpc.ServicerContext) -> pb.Empty:
        queue = self.namespace(context).queue(request.queue)
        try:
            queue.ack(_lease(request))
        except LeaseExpiredError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return pb.Empty()

    def nack(self, request: pb.LeaseRef, context: grpc.ServicerContext) -> pb.Empty:
        self.namespace(context).queue(request.queue).nack(_lease(request))
        return pb.Empty()

    def extend(self, request: pb.ExtendRequest, context: grpc.ServicerContext) -> pb.LeaseReply:
        queue = self.namespace(context).queue(request.lease.queue)
        try:
            return _lease_reply(queue.extend(_lease(request.lease), request.lease_s))
        except LeaseExpiredError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))

    def stats(self, request: pb.QueueRef, context: grpc.ServicerContext) -> pb.StatsReply:
        stats = self.namespace(context).queue(request.queue).stats()
        return pb.StatsReply(ready=stats.ready, leased=stats.leased, dead=stats.dead)


def _lease(ref: pb.LeaseRef) -> Lease:
    # The in-process queue identifies a delivery by item id and token only.
    return Lease(
        queue=ref.queue, item_id=ref.item_id, payload=b"", token=ref.token, delivery=0,
        expires_at=0.0,
    )  # fmt: skip


def _lease_reply(lease: Lease) -> pb.LeaseReply:
    return pb.LeaseReply(
        found=True,
        item_id=lease.item_id,
        payload=lease.payload,
        token=lease.token,
        delivery=lease.delivery,
        expires_at=lease.expires_at,
    )
