"""A work queue on a JetStream work-queue stream, with per-call leases.

Per queue ``name`` in namespace ``ns``: stream ``RLAX_<ns>_Q_<name>`` (work-queue
retention, de-duplication by ``Nats-Msg-Id`` = item id over ``dedupe_window_s``) and one
durable pull consumer that every client shares, so each item goes to one consumer.

**Leases.** JetStream has one ack wait per consumer, but :meth:`Queue.get` takes the
lease per call. The consumer's ack wait is a short *tick* (``lease_tick_s``); the client
that holds a lease keeps it with ``+WPI`` (in progress) every third of a tick until the
lease ends, and then hands the item back with ``-NAK``, so it comes back on time. If the
holder dies (preemption), the server hands the item out again at most one tick after
the holder's last keep-alive. Acks and extends after the lease's end are refused here,
from the lease's own expiry time, before anything is sent.

**Dead letters.** The consumer's ``max_deliver`` is ``max_deliveries``; the server's
max-deliveries advisories for the consumer are captured by the stream
``RLAX_<ns>_Q_<name>_DEAD``, whose message count is the ``dead`` figure of :meth:`stats`.

**Limits.** A queue holds at most ``max_queue_items`` items and ``max_queue_gb`` bytes; a
put past them is refused (a ``TransportError`` saying the queue is full), never taken by
dropping an older item. The stream takes one consumer, the shared one. Only the trainer
(or a lab client) creates queues; other roles wait for them
(:func:`~rlax_transport_nats.param_streams.ensure_stream`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import re
import threading
import time
from collections import OrderedDict
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from rlax_core.contracts.queue import Queue
from rlax_core.errors import (
    LeaseExpiredError,
    TransportAuthError,
    TransportClosedError,
    TransportError,
)
from rlax_core.kit.transport import queue_item
from rlax_core.types.lease import Lease, QueueStats
from rlax_transport_nats import permissions
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection, api_error
from rlax_transport_nats.param_streams import StreamMissingError, ensure_stream

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_CONSUMER = permissions.CONSUMER
# JetStream's refusals of a put to a full stream (discard new).
_FULL = ("maximum messages exceeded", "maximum bytes exceeded")
# A blocked get(timeout=None) re-issues its pull request this often.
_LONG_POLL_S = 5.0
# get(timeout=0) still needs one round trip to the server.
_NO_WAIT_S = 0.05
_REMEMBERED_TOKENS = 10_000


class NatsQueue(Queue):
    """One named work queue on JetStream (see the module docstring).

    Args:
        connection: the NATS connection to use.
        config: the transport settings.
        name: the queue's name (letters, digits, ``-`` and ``_``).
        max_deliveries: overrides ``config.max_deliveries`` when the queue is created.
        owns_connection: close ``connection`` with the queue.
    """

    def __init__(
        self,
        connection: NatsConnection,
        config: NatsTransportConfig,
        name: str,
        *,
        max_deliveries: int | None = None,
        owns_connection: bool = False,
    ) -> None:
        if not _NAME.match(name):
            raise ValueError(f"queue names use letters, digits, '-' and '_'; got {name!r}")
        self._conn = connection
        self._config = config
        self._owns = owns_connection
        self._name = name
        self._stream = permissions.queue_stream(config.namespace, name)
        self._dead_stream = f"{self._stream}_DEAD"
        self._subject = permissions.queue_subject(config.namespace, name)
        self._max_deliveries = max_deliveries or config.max_deliveries
        self._tick = config.lease_tick_s
        self._closed = False
        self._inflight: set[concurrent.futures.Future] = set()
        self._held: dict[str, float] = {}  # token -> expires_at of leases this client keeps
        self._finished: OrderedDict[str, bool] = OrderedDict()  # token -> acked?
        # token -> the connection's reconnect count when the item was handed to it
        self._handed: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._pulls: list[Any] = []  # idle pull subscriptions, one per concurrent get
        self._call(self._conn.retrying(f"creating queue {name!r}", self._setup))

    @classmethod
    def open(
        cls, config: NatsTransportConfig, name: str, *, max_deliveries: int | None = None
    ) -> NatsQueue:
        """A queue client on a connection of its own (closed with the queue)."""
        return cls(
            NatsConnection(config),
            config,
            name,
            max_deliveries=max_deliveries,
            owns_connection=True,
        )

    @property
    def name(self) -> str:
        return self._name

    def put(self, item_id: str, payload: bytes) -> bool:
        self._check_open()
        data = queue_item(item_id, payload)
        if not permissions.may_put(self._conn.auth.role, self._name):
            raise self._not_for_role("put to")

        async def publish() -> Any:
            try:
                return await self._conn.js.publish(
                    self._subject, data, headers={"Nats-Msg-Id": item_id}
                )
            except nats.js.errors.APIError as exc:  # 503, but waiting does not empty it
                if any(full in str(exc.description) for full in _FULL):
                    raise TransportError(
                        f"queue {self._name!r} on NATS at {self._conn.address} is full "
                        f"({exc.description}; max_queue_items {self._config.max_queue_items}, "
                        f"max_queue_gb {self._config.max_queue_gb:g}): its consumers are "
                        "behind or gone"
                    ) from None
                raise

        ack = self._call(self._conn.retrying(f"put to queue {self._name!r}", publish))
        return not ack.duplicate

    def get(self, lease_s: float, timeout: float | None = 0.0) -> Lease | None:
        self._check_open()
        lease_s = self._lease_seconds(lease_s)
        if not permissions.may_lease(self._conn.auth.role, self._name):
            raise self._not_for_role("lease from")
        message = self._call(self._next_message(timeout))
        if message is None:
            return None
        token = message.reply
        expires_at = time.time() + lease_s
        with self._lock:
            self._held[token] = expires_at
            self._handed[token] = self._conn.reconnects
            while len(self._handed) > _REMEMBERED_TOKENS:
                self._handed.popitem(last=False)
        self._conn.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._keep(token)))
        return Lease(
            queue=self._name,
            item_id=(message.headers or {}).get(
                "Nats-Msg-Id", str(message.metadata.sequence.stream)
            ),
            payload=message.data,
            token=token,
            delivery=message.metadata.num_delivered,
            expires_at=expires_at,
        )

    def ack(self, lease: Lease) -> None:
        self._check_open()
        with self._lock:
            if self._finished.get(lease.token):
                return  # the same lease acked twice
        if lease.seconds_left() <= 0:
            raise LeaseExpiredError(
                f"lease on item {lease.item_id!r} of queue {self._name!r} ended before the "
                "ack; the item is handed out again"
            )
        self._check_answerable(lease)
        self._finish(lease.token, acked=True)

        async def ack() -> Any:
            return await self._conn.nc.request(lease.token, b"+ACK", timeout=5)

        self._call(self._conn.retrying(f"ack on queue {self._name!r}", ack))

    def nack(self, lease: Lease) -> None:
        self._check_open()
        with self._lock:
            if lease.token in self._finished:
                return
        if lease.seconds_left() <= 0:
            return
        self._check_answerable(lease)
        self._finish(lease.token, acked=False)
        self._call(self._conn.nc.publish(lease.token, b"-NAK"))

    def extend(self, lease: Lease, lease_s: float) -> Lease:
        self._check_open()
        with self._lock:
            finished = lease.token in self._finished
        if finished or lease.seconds_left() <= 0:
            raise LeaseExpiredError(
                f"lease on item {lease.item_id!r} of queue {self._name!r} ended before "
                "it was extended"
            )
        self._check_answerable(lease)
        expires_at = time.time() + self._lease_seconds(lease_s)
        with self._lock:
            kept = lease.token in self._held
            self._held[lease.token] = expires_at
        self._call(self._conn.nc.publish(lease.token, b"+WPI"))
        if not kept:  # a lease handed out to another client: keep it from here
            self._conn.loop.call_soon_threadsafe(
                lambda: asyncio.ensure_future(self._keep(lease.token))
            )
        return Lease(
            queue=lease.queue,
            item_id=lease.item_id,
            payload=lease.payload,
            token=lease.token,
            delivery=lease.delivery,
            expires_at=expires_at,
        )

    def stats(self) -> QueueStats:
        self._check_open()

        async def read() -> QueueStats:
            consumer = await self._conn.js.consumer_info(self._stream, _CONSUMER)
            dead = await self._conn.js.stream_info(self._dead_stream)
            return QueueStats(
                ready=consumer.num_pending or 0,
                leased=consumer.num_ack_pending or 0,
                dead=dead.state.messages,
            )

        return self._call(self._conn.retrying(f"stats of queue {self._name!r}", read))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._held.clear()  # keep-alives stop; held items come back within a tick
            pending = list(self._inflight)
        for future in pending:
            future.cancel()
        if self._owns:
            self._conn.close()

    # -- internals --

    def _lease_seconds(self, lease_s: float) -> float:
        """A lease's length: positive and finite, at most the server's ``max_lease_s``."""
        if not (isinstance(lease_s, int | float) and math.isfinite(lease_s) and lease_s > 0):
            raise ValueError(f"lease_s must be a positive finite number, got {lease_s!r}")
        return min(float(lease_s), self._config.server.max_lease_s)

    def _not_for_role(self, action: str) -> TransportAuthError:
        return TransportAuthError(
            f"the {self._conn.auth.role} may not {action} queue {self._name!r} (NATS at "
            f"{self._conn.address} refuses it too): see the README's permission table"
        )

    def _check_answerable(self, lease: Lease) -> None:
        """With a role's credential the server lets a connection answer only the items
        handed to it, and forgets them when the connection is made again."""
        if self._conn.auth.role is None:
            return  # a lab client answers any lease, as the server lets it
        with self._lock:
            epoch = self._handed.get(lease.token)
        if epoch is None:
            raise TransportAuthError(
                f"the lease on item {lease.item_id!r} of queue {self._name!r} was handed to "
                "another client; only its holder may answer it"
            )
        if epoch != self._conn.reconnects:
            raise LeaseExpiredError(
                f"the lease on item {lease.item_id!r} of queue {self._name!r} was taken "
                "before this client reconnected, and the server lets only the connection it "
                "was handed to answer it; the item is handed out again"
            )

    def _call(self, coro: Any) -> Any:
        try:
            return self._conn.call(coro, timeout=None, inflight=self._inflight)
        except TransportClosedError:
            self._check_open()
            raise
        except nats.js.errors.APIError as exc:
            raise api_error(f"queue {self._name!r}", self._conn.address, exc) from exc

    def _finish(self, token: str, *, acked: bool) -> None:
        with self._lock:
            self._held.pop(token, None)
            self._handed.pop(token, None)
            self._finished[token] = acked
            while len(self._finished) > _REMEMBERED_TOKENS:
                self._finished.popitem(last=False)

    async def _next_message(self, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + max(timeout, _NO_WAIT_S)
        pull = self._pulls.pop() if self._pulls else await self._subscribe()
        try:
            while True:
                wait = _LONG_POLL_S if deadline is None else deadline - time.monotonic()
                if wait <= 0.001:
                    return None
                try:
                    (message,) = await pull.fetch(1, timeout=min(wait, _LONG_POLL_S))
                    return message
                except (TimeoutError, nats.errors.TimeoutError):
                    # A role the server does not let lease here waits in vain: say so.
                    await self._conn.check_denied(f"leasing from queue {self._name!r}")
                    continue  # nothing yet, or the connection is coming back: ask again
        finally:
            self._pulls.append(pull)

    async def _subscribe(self) -> Any:
        return await self._conn.retrying(
            f"subscribing to queue {self._name!r}",
            lambda: self._conn.js.pull_subscribe_bind(durable=_CONSUMER, stream=self._stream),
        )

    async def _keep(self, token: str) -> None:
        """Keeps one held lease alive until it ends, then hands the item back."""
        while True:
            expires_at = self._held.get(token)
            if expires_at is None:
                return  # acked, nacked, or this client closed
            left = expires_at - time.time()
            if left <= 0:
                with self._lock:
                    self._held.pop(token, None)
                    self._finished.setdefault(token, False)
                await self._send_quietly(token, b"-NAK")
                return
            await asyncio.sleep(min(left, self._tick / 3))
            if self._held.get(token, 0) > time.time():
                await self._send_quietly(token, b"+WPI")

    async def _send_quietly(self, subject: str, body: bytes) -> None:
        with contextlib.suppress(Exception):  # disconnected: the server's ack wait takes over
            await self._conn.nc.publish(subject, body)

    async def _setup(self) -> None:
        config = self._config
        await ensure_stream(
            self._conn,
            StreamConfig(
                name=self._stream,
                subjects=[self._subject],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=config.dedupe_window_s,
                max_msgs=config.max_queue_items,
                max_bytes=int(config.max_queue_gb * 1e9),
                discard=DiscardPolicy.NEW,
                max_consumers=1,
            ),
        )
        await ensure_stream(
            self._conn,
            StreamConfig(
                name=self._dead_stream,
                subjects=[f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self._stream}.{_CONSUMER}"],
                storage=StorageType.FILE,
                max_msgs=config.max_dead_letters,
                discard=DiscardPolicy.OLD,
            ),
        )
        await self._ensure_consumer()
        self._pulls.append(await self._subscribe())

    async def _ensure_consumer(self) -> None:
        js = self._conn.js
        deadline = self._conn.loop.time() + self._config.reconnect_timeout_s
        while True:
            try:
                await js.consumer_info(self._stream, _CONSUMER)
                return
            except nats.js.errors.NotFoundError:
                if self._conn.auth.manages_streams:
                    with contextlib.suppress(nats.js.errors.BadRequestError):  # made meanwhile
                        await js.add_consumer(
                            self._stream,
                            ConsumerConfig(
                                durable_name=_CONSUMER,
                                ack_policy=AckPolicy.EXPLICIT,
                                ack_wait=self._tick,
                                max_deliver=self._max_deliveries or -1,
                                max_ack_pending=-1,
                                max_waiting=4096,
                            ),
                        )
                    return
                if self._conn.loop.time() >= deadline:
                    raise StreamMissingError(
                        f"queue {self._name!r} on NATS at {self._conn.address} has no consumer "
                        f"and {self._conn.auth.describe()} may not create one: the trainer does"
                    ) from None
                await asyncio.sleep(0.5)

    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(
                f"this client of queue {self._name!r} on NATS at {self._conn.address} is closed"
            )
