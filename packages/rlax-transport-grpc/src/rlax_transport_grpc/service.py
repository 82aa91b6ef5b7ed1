"""The gRPC parameter server's handlers, over rlax-core's in-process store and queues.

Each handler learns its caller's role (:mod:`rlax_transport_grpc.access`), checks what
the request names against it, bounds what it asks for (:mod:`rlax_transport_grpc.limits`)
and works on its namespace (:mod:`rlax_transport_grpc.namespace`). Handlers raise
:class:`~rlax_core.errors.RlaxError` or ``ValueError``; the server turns each into a
status with its message (``server.py``), so no input reaches a client as a traceback.

Only a trainer (or a trusted caller) brings a namespace into being; until it has, other
roles see an empty one: no versions, no items, their watches and gets wait.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from rlax_core.contracts.parameter_store import FetchedParameters
from rlax_core.errors import (
    ChecksumMismatchError,
    LeaseExpiredError,
    TransportClosedError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.kit.transport import ROLES, parse_manifest
from rlax_core.types.lease import Lease
from rlax_transport_grpc import wire
from rlax_transport_grpc.access import HOLDER_KEY, Caller, Gatekeeper, RoleDeniedError
from rlax_transport_grpc.bulk import BulkSender
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.lease_tokens import LeaseSeal
from rlax_transport_grpc.limits import (
    CallGate,
    QuotaExceededError,
    ServerBusyError,
    wait_seconds,
)
from rlax_transport_grpc.namespace import Namespace, check_name, count_namespaces
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.versions_on_disk import Upload, remove_versions

NAMESPACE_KEY = "rlax-namespace"
MALFORMED = object()  # what a request that does not parse becomes (see server.py)
_DISK_MARGIN = 64 << 20
_POLL_S = 0.1


class TransportService:
    """Every RPC of rlax_transport.proto, as plain functions of (request, context).

    Args:
        state_dir: the folder holding a sub-folder per namespace.
        config: the server's settings.
        gatekeeper: who the callers are.
    """

    def __init__(
        self, state_dir: Path, config: GrpcTransportConfig, gatekeeper: Gatekeeper
    ) -> None:
        self.state_dir = state_dir
        self.config = config
        self.gatekeeper = gatekeeper
        self.seal = LeaseSeal()
        server = config.server
        self.waiting = CallGate(
            "waiting calls (gets that wait, version watches)",
            server.max_waiting_calls,
            "server.max_waiting_calls",
        )
        self.streams = CallGate(
            "streamed fetches", server.max_fetch_streams, "server.max_fetch_streams"
        )
        self._namespaces: dict[str, Namespace] = {}
        self._lock = threading.Lock()
        self.bulk: BulkSender | None = None  # set by the server when it has a bulk port

    # -- callers and namespaces --

    def caller(self, context: grpc.ServicerContext) -> Caller:
        """The caller of this call (its credential was checked by the interceptor).

        Raises:
            RoleDeniedError: with mutual TLS, the certificate names another role.
        """
        caller = self.gatekeeper.caller(dict(context.invocation_metadata()))
        if self.config.server.verify_clients and caller.role in ROLES:
            names = context.auth_context().get("x509_common_name", [])
            if names and names[0].decode(errors="replace") != caller.role:
                self.gatekeeper.count_refusal()
                raise RoleDeniedError(
                    f"the client certificate is the {names[0].decode(errors='replace')}'s, "
                    f"the credential the {caller.role}'s"
                )
        return caller

    def namespace(self, context: grpc.ServicerContext, caller: Caller) -> Namespace | None:
        """The call's namespace; made for a trainer, None for others until it exists.

        Raises:
            ValueError: a bad namespace name.
            QuotaExceededError: a new namespace past ``server.max_namespaces``.
        """
        name = dict(context.invocation_metadata()).get(NAMESPACE_KEY, "rlax")
        check_name(name, "namespace")
        with self._lock:
            space = self._namespaces.get(name)
            if space is not None:
                return space
            folder = self.state_dir / name
            if not folder.is_dir():
                if not caller.manages:
                    return None
                if count_namespaces(self.state_dir, self._namespaces) >= (
                    self.config.server.max_namespaces
                ):
                    raise QuotaExceededError(
                        f"the server holds {self.config.server.max_namespaces} namespaces, the "
                        f"most server.max_namespaces allows; namespace {name!r} was not made"
                    )
            space = self._namespaces[name] = Namespace(name, folder, self.config)
            return space

    def _existing(
        self, context: grpc.ServicerContext, caller: Caller, wait: float
    ) -> Namespace | None:
        """The namespace, waiting up to ``wait`` seconds for its trainer to make it."""
        space = self.namespace(context, caller)
        deadline = time.monotonic() + wait
        while space is None and context.is_active() and time.monotonic() < deadline:
            threading.Event().wait(_POLL_S)
            space = self.namespace(context, caller)
        return space

    def close(self) -> None:
        with self._lock:
            for namespace in self._namespaces.values():
                namespace.close()

    # -- parameter server --

    def load(self) -> dict[str, int]:
        """The server's counts: what it holds now and what it refused so far."""
        bulk = self.bulk
        return {
            "waiting_calls": self.waiting.active,
            "fetch_streams": self.streams.active,
            "bulk_connections": bulk.active if bulk else 0,
            "refused_busy": self.waiting.refused + self.streams.refused,
            "refused_bulk": bulk.refused if bulk else 0,
            "refused_credentials": self.gatekeeper.refused,
        }

    def ping(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.ServerInfo:
        self.namespace(context, self.caller(context))  # a trainer's first call makes it
        return pb.ServerInfo(
            keep_versions=self.config.keep_versions,
            max_message_bytes=self.config.max_message_bytes,
            **self.load(),
        )

    def publish(self, frames: Iterator[Any], context: grpc.ServicerContext) -> pb.Manifest:
        space = self.namespace(context, self.caller(context))
        assert space is not None  # the interceptor lets only managers publish
        first = next(frames, None)
        if not isinstance(first, pb.Manifest):
            raise ValueError("a publish starts with its manifest frame")
        source = f"a publisher to namespace {space.name!r}"
        announced = parse_manifest(first.policy_json, source, self.config.server.manifest_limits)
        _check_new(space, announced.version)
        total = sum(t.nbytes for t in announced.tensors)
        free = shutil.disk_usage(space.folder).free
        if total + _DISK_MARGIN > free:
            raise QuotaExceededError(
                f"version {announced.version} is {total} bytes; the server's disk has {free} free"
            )
        upload = Upload(space.folder, announced)
        try:
            for frame in frames:
                if frame is MALFORMED or isinstance(frame, pb.Manifest):
                    raise ValueError("a publish frame after the manifest is not a chunk")
                upload.write(*frame)
            missing = upload.missing()
            if missing:
                raise ChecksumMismatchError(f"tensors {missing} arrived incomplete")
            arrays = upload.verified_arrays()  # mapped and checked before it is visible
            with space.lock:  # one commit at a time: numbers are checked and taken together
                _check_new(space, announced.version)
                upload.commit(space.folder, bytes(first.policy_json))
                space.store.adopt_version(announced, arrays)
        except BaseException:
            upload.discard()
            raise
        finally:
            remove_versions(space.folder, set(space.store.versions()))
        return pb.Manifest(policy_json=announced.to_bytes())

    def get_manifest(
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> pb.Manifest:
        space = self.namespace(context, self.caller(context))
        if space is None:
            if request.version < 0:
                return pb.Manifest(policy_json=b"")
            raise VersionNotFoundError(f"policy version {request.version} was never published")
        if request.version < 0:
            latest = space.store.latest()
            return pb.Manifest(policy_json=latest.to_bytes() if latest else b"")
        return pb.Manifest(
            policy_json=space.store.fetch(request.version, names=[]).version.to_bytes()
        )

    def list_versions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.VersionList:
        space = self.namespace(context, self.caller(context))
        return pb.VersionList(versions=space.store.versions() if space else [])

    def fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[bytes]:
        with self.streams.held():
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
        space = self.namespace(context, self.caller(context))
        if space is None:
            raise VersionNotFoundError(f"policy version {request.version} was never published")
        try:
            return space.store.fetch(request.version, names=list(request.names) or None)
        except KeyError as exc:
            raise ValueError(str(exc)) from None

    def watch_versions(
        self, request: pb.VersionRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.Manifest]:
        caller = self.caller(context)
        with self.waiting.held():
            space = self._existing(context, caller, wait=float("inf"))
            if space is None:
                return
            watcher = space.store.client()
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
        caller = self.caller(context)
        caller.check_queue("OpenQueue", request.queue)
        space = self.namespace(context, caller)
        if space is not None and caller.manages:
            space.queue(request.queue, request.max_deliveries or None)
        elif space is not None:  # others never make a queue, nor choose its settings
            space.existing_queue(request.queue)
        return pb.Empty()

    def put(self, request: pb.PutRequest, context: grpc.ServicerContext) -> pb.PutReply:
        caller = self.caller(context)
        caller.check_queue("Put", request.queue)
        space = self.namespace(context, caller)
        if space is None:
            raise RoleDeniedError(
                "this namespace does not exist yet: the trainer's first call makes it"
            )
        return pb.PutReply(added=space.put(request.queue, request.item_id, request.payload))

    def get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> pb.LeaseReply:
        caller = self.caller(context)
        caller.check_queue("Get", request.queue)
        server = self.config.server
        lease_s = request.lease_s  # the queue's table checks it (max_lease_s)
        wait = wait_seconds(request.timeout_s, server.max_wait_s)
        if wait > 0 and not self.waiting.try_enter():
            reply = self._lease(context, caller, request.queue, lease_s, 0.0)
            if reply.found:  # an item was ready: no need to wait
                return reply
            raise ServerBusyError(
                f"the server is busy: {self.waiting.limit} waiting calls already "
                "(server.max_waiting_calls); retry shortly"
            )
        try:
            return self._lease(context, caller, request.queue, lease_s, wait)
        finally:
            if wait > 0:
                self.waiting.leave()

    def _lease(
        self, context: grpc.ServicerContext, caller: Caller, name: str, lease_s: float, wait: float
    ) -> pb.LeaseReply:
        start = time.monotonic()
        space = self._existing(context, caller, wait)
        queue = None
        while space is not None and queue is None:
            queue = space.queue(name) if caller.manages else space.existing_queue(name)
            if queue is None and (time.monotonic() - start >= wait or not context.is_active()):
                break
            if queue is None:
                threading.Event().wait(_POLL_S)
        if queue is None:
            return pb.LeaseReply(found=False)
        consumer = queue.client()
        context.add_callback(consumer.close)  # a cancelled call leases nothing
        try:
            lease = consumer.get(lease_s, timeout=max(0.0, wait - (time.monotonic() - start)))
        except TransportClosedError:
            return pb.LeaseReply(found=False)
        if lease is None:
            return pb.LeaseReply(found=False)
        return pb.LeaseReply(
            found=True,
            item_id=lease.item_id,
            payload=lease.payload,
            token=self.seal.seal(
                space.name, name, lease.item_id, _holder(context, caller), lease.token
            ),
            delivery=lease.delivery,
            expires_at=lease.expires_at,
        )

    def ack(self, request: pb.LeaseRef, context: grpc.ServicerContext) -> pb.Empty:
        queue, lease = self._held(request, "Ack", context)
        if queue is None or lease is None:
            raise LeaseExpiredError(
                f"lease on item {request.item_id!r} of queue {request.queue!r} was not granted "
                "to this caller, or has ended"
            )
        queue.ack(lease)
        return pb.Empty()

    def nack(self, request: pb.LeaseRef, context: grpc.ServicerContext) -> pb.Empty:
        queue, lease = self._held(request, "Nack", context)
        if queue is not None and lease is not None:  # nacking an ended lease does nothing
            queue.nack(lease)
        return pb.Empty()

    def extend(self, request: pb.ExtendRequest, context: grpc.ServicerContext) -> pb.LeaseReply:
        queue, lease = self._held(request.lease, "Extend", context)
        if queue is None or lease is None:
            raise LeaseExpiredError(
                f"lease on item {request.lease.item_id!r} of queue {request.lease.queue!r} was "
                "not granted to this caller, or has ended"
            )
        extended = queue.extend(lease, request.lease_s)  # its table checks lease_s
        return pb.LeaseReply(
            found=True,
            item_id=extended.item_id,
            token=request.lease.token,
            delivery=extended.delivery,
            expires_at=extended.expires_at,
        )

    def _held(
        self, ref: pb.LeaseRef, method: str, context: grpc.ServicerContext
    ) -> tuple[Any, Lease | None]:
        """The queue and the queue's own lease a sealed token opens (None, None: none)."""
        caller = self.caller(context)
        caller.check_queue(method, ref.queue)
        space = self.namespace(context, caller)
        if space is None:
            return None, None
        token = self.seal.open(
            space.name, ref.queue, ref.item_id, _holder(context, caller), ref.token
        )
        queue = space.existing_queue(ref.queue)
        if token is None or queue is None:
            return None, None
        # The queue identifies a delivery by item id and token only.
        return queue, Lease(queue=ref.queue, item_id=ref.item_id, payload=b"", token=token,
                            delivery=0, expires_at=0.0)  # fmt: skip

    def stats(self, request: pb.QueueRef, context: grpc.ServicerContext) -> pb.StatsReply:
        caller = self.caller(context)
        caller.check_queue("Stats", request.queue)
        space = self.namespace(context, caller)
        queue = None if space is None else space.existing_queue(request.queue)
        if queue is None:
            return pb.StatsReply()
        stats = queue.stats()
        return pb.StatsReply(ready=stats.ready, leased=stats.leased, dead=stats.dead)


def _holder(context: grpc.ServicerContext, caller: Caller) -> str:
    """Who a lease is granted to: the role, and the client's own id (one per channel)."""
    return f"{caller.role}/{dict(context.invocation_metadata()).get(HOLDER_KEY, '')}"


def _check_new(space: Namespace, version: int) -> None:
    newest = space.store.newest_ever()
    if version <= newest:
        raise VersionConflictError(
            f"cannot publish version {version}: version {newest} was already published and "
            "versions are never reused"
        )
