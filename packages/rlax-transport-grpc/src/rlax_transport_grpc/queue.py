"""The queue client of the gRPC transport; the server holds the items and leases."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import grpc

from rlax_core.contracts.queue import Queue
from rlax_core.errors import TransportClosedError
from rlax_core.kit.transport import queue_item
from rlax_core.types.lease import Lease, QueueStats
from rlax_transport_grpc.channel import GrpcChannel
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.limits import ServerBusyError
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb

# A blocked get(timeout=None) asks the server again this often.
_LONG_POLL_S = 5.0


class GrpcQueue(Queue):
    """A client of one named queue on the parameter server.

    Leases live on the server (rlax-core's in-process queue), so their deadlines hold
    whatever happens to the client: a preempted worker's items come back on time.

    Args:
        channel: the channel to the server.
        name: the queue's name.
        max_deliveries: the setting the queue is created with, if this creates it.
        owns_channel: close the channel with the queue.
    """

    def __init__(
        self,
        channel: GrpcChannel,
        name: str,
        *,
        max_deliveries: int | None = None,
        owns_channel: bool = False,
    ) -> None:
        if not re.match(r"^[A-Za-z0-9_-]+$", name):
            raise ValueError(f"queue names use letters, digits, '-' and '_'; got {name!r}")
        self._ch = channel
        self._name = name
        self._owns = owns_channel
        self._closed = False
        self._lock = threading.Lock()
        self._inflight: set[Any] = set()
        limit = max_deliveries or channel.config.max_deliveries or 0
        request = pb.OpenQueueRequest(queue=name, max_deliveries=limit)
        self._ch.call(
            f"opening queue {name!r}",
            lambda t: self._ch.queues.OpenQueue(request, **self._ch.kw(t)),
        )

    @classmethod
    def open(
        cls, config: GrpcTransportConfig, name: str, *, max_deliveries: int | None = None
    ) -> GrpcQueue:
        """A queue client on a channel of its own (closed with the queue)."""
        return cls(GrpcChannel(config), name, max_deliveries=max_deliveries, owns_channel=True)

    @property
    def name(self) -> str:
        return self._name

    def put(self, item_id: str, payload: bytes) -> bool:
        self._check_open()
        data = queue_item(item_id, payload)
        request = pb.PutRequest(queue=self._name, item_id=item_id, payload=data)
        reply = self._unary("put", self._ch.queues.Put, request)
        return reply.added

    def get(self, lease_s: float, timeout: float | None = 0.0) -> Lease | None:
        self._check_open()
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            wait = _LONG_POLL_S if deadline is None else max(0.0, deadline - time.monotonic())
            request = pb.GetRequest(
                queue=self._name, lease_s=lease_s, timeout_s=min(wait, _LONG_POLL_S)
            )
            try:
                reply = self._unary("get", self._ch.queues.Get, request, retry_busy=False)
            except ServerBusyError as busy:  # no item was ready, and no place to wait
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                time.sleep(busy.retry_after_s if left is None else min(busy.retry_after_s, left))
                continue
            if reply.found:
                return _lease(self._name, reply)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def ack(self, lease: Lease) -> None:
        self._check_open()
        self._unary("ack", self._ch.queues.Ack, _ref(lease))

    def nack(self, lease: Lease) -> None:
        self._check_open()
        self._unary("nack", self._ch.queues.Nack, _ref(lease))

    def extend(self, lease: Lease, lease_s: float) -> Lease:
        self._check_open()
        request = pb.ExtendRequest(lease=_ref(lease), lease_s=lease_s)
        return _lease(self._name, self._unary("extend", self._ch.queues.Extend, request))

    def stats(self) -> QueueStats:
        self._check_open()
        reply = self._unary("stats", self._ch.queues.Stats, pb.QueueRef(queue=self._name))
        return QueueStats(ready=reply.ready, leased=reply.leased, dead=reply.dead)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._inflight)
        for call in pending:
            call.cancel()
        if self._owns:
            self._ch.close()

    def _unary(self, what: str, method: Any, request: Any, *, retry_busy: bool = True) -> Any:
        """One call, cancellable by :meth:`close` (a blocked get must wake)."""

        def attempt(timeout: float) -> Any:
            call = method.future(request, **self._ch.kw(timeout))
            with self._lock:
                if self._closed:
                    call.cancel()
                self._inflight.add(call)
            try:
                return call.result()
            except grpc.FutureCancelledError:
                raise TransportClosedError(f"queue {self._name!r} was closed") from None
            finally:
                with self._lock:
                    self._inflight.discard(call)

        try:
            return self._ch.call(f"{what} on queue {self._name!r}", attempt, retry_busy=retry_busy)
        except TransportClosedError:
            self._check_open()
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(
                f"this client of queue {self._name!r} at {self._ch.address} is closed"
            )
        self._ch.check_open()


def _ref(lease: Lease) -> pb.LeaseRef:
    return pb.LeaseRef(queue=lease.queue, item_id=lease.item_id, token=lease.token)


def _lease(queue: str, reply: pb.LeaseReply) -> Lease:
    return Lease(
        queue=queue,
        item_id=reply.item_id,
        payload=reply.payload,
        token=reply.token,
        delivery=reply.delivery,
        expires_at=reply.expires_at,
    )
