"""One NATS connection, driven by its own event loop thread, for synchronous callers.

nats-py is asyncio; trainers and workers are threads. Each connection runs one event
loop in a daemon thread and every public call is a coroutine submitted to it with a
bounded wait, so a caller never hangs: it gets a result, or a specific
:class:`~rlax_core.errors.RlaxError` naming the server and what to check.

A lost connection is restored by nats-py (forever, every 250 ms); meanwhile calls made
through :meth:`NatsConnection.call_retrying` wait up to ``reconnect_timeout_s`` for it
and then retry, so a server restart is invisible to callers beyond a delay.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.aio.client
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from rlax_core.errors import (
    RlaxError,
    TransportAuthError,
    TransportClosedError,
    TransportError,
    TransportUnreachableError,
)
from rlax_transport_nats.auth import ClientAuth, client_auth
from rlax_transport_nats.config import NatsTransportConfig

T = TypeVar("T")
# nats-server's asynchronous error for a subject the client's permissions deny; the
# request it answers then times out, so the error is kept to explain the timeout.
_DENIED = "permissions violation"
_DENIAL_MEMORY_S = 30.0

_ATTEMPT_S = 5.0

# nats-py reads the socket 32 KiB at a time, one event-loop turn per read; weights come
# in 8-16 MiB chunks, for which that costs more than the copy itself. Reads of up to
# 4 MiB cut the turns 128-fold (measured with `rlax bench transport`).
nats.aio.client.DEFAULT_BUFFER_SIZE = max(nats.aio.client.DEFAULT_BUFFER_SIZE, 4 << 20)

# Errors after which the same call may succeed once the connection is back.
RETRYABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.FlushTimeoutError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
    asyncio.TimeoutError,
    ConnectionError,
)


class NatsConnection:
    """A connected nats-py client on a private event loop thread.

    Args:
        config: the transport settings (servers, credentials, TLS, time limits).

    Raises:
        TransportAuthError: the server refused the credentials.
        TransportUnreachableError: no server answered within ``connect_timeout_s``.
    """

    def __init__(self, config: NatsTransportConfig) -> None:
        self.config = config
        self.address = config.address
        self.auth: ClientAuth = client_auth(config)
        self._denials: list[tuple[float, str]] = []
        self.reconnects = 0  # the server forgets what it let this client answer at each
        self._closed = False
        self._inflight: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()
        self._last_error: BaseException | None = None
        self._auth_error: BaseException | None = None  # any refusal seen while connecting
        self._reconnect_listeners: list[Callable[[], Awaitable[None]]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rlax-nats-loop", daemon=True
        )
        self._thread.start()
        self.nc = Client()
        try:
            self.call(self._connect(), timeout=config.connect_timeout_s + 5)
        except BaseException:
            self._stop_loop()
            raise
        # One attempt's limit; a request lost in a disconnect is retried after it, so it
        # is short beside reconnect_timeout_s (an 8 MiB chunk takes milliseconds).
        self.js = self.nc.jetstream(timeout=min(_ATTEMPT_S, config.reconnect_timeout_s / 3))

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The connection's event loop (for coroutines of the store and queues)."""
        return self._loop

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def check_open(self, what: str) -> None:
        """Raises ``TransportClosedError`` if the connection was closed."""
        if self._closed:
            raise TransportClosedError(f"{what} on NATS at {self.address} is closed")

    def on_reconnect(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Runs ``listener()`` on the loop after every reconnection (to catch up)."""
        self._reconnect_listeners.append(listener)

    def call(
        self,
        coro: Awaitable[T],
        timeout: float | None,
        *,
        inflight: set[concurrent.futures.Future] | None = None,
    ) -> T:
        """Runs a coroutine on the loop and waits at most ``timeout`` seconds for it.

        Args:
            coro: the coroutine.
            timeout: seconds to wait (None: as long as it takes; the coroutine must bound
                itself then).
            inflight: a set the caller's own ``close()`` cancels; the call is in it while
                it runs.

        Raises:
            TransportClosedError: the connection was closed before or during the call.
            TransportUnreachableError: the call did not finish in time.
        """
        if self._closed:
            coro.close()  # type: ignore[attr-defined]
            raise TransportClosedError(f"the NATS connection to {self.address} is closed")
        future = asyncio.run_coroutine_threadsafe(_quiet_when_cancelled(coro), self._loop)
        with self._lock:
            self._inflight.add(future)
            if inflight is not None:
                inflight.add(future)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TransportUnreachableError(
                f"NATS at {self.address} did not answer within {timeout:.1f} s; check that "
                "the server runs and is reachable from here"
            ) from None
        except asyncio.CancelledError:
            raise TransportClosedError(
                f"the NATS connection to {self.address} was closed during the call"
            ) from None
        except concurrent.futures.CancelledError:
            raise TransportClosedError(
                f"the NATS connection to {self.address} was closed during the call"
            ) from None
        finally:
            with self._lock:
                self._inflight.discard(future)
                if inflight is not None:
                    inflight.discard(future)

    def raise_if_denied(self, what: str) -> None:
        """Raises ``TransportAuthError`` if the server recently denied this client a subject.

        nats-server refuses a denied publish or subscribe with an asynchronous error and
        drops the message, so the call itself only times out; this names the cause.
        """
        with self._lock:
            now = time.monotonic()
            recent = [text for at, text in self._denials if now - at < _DENIAL_MEMORY_S]
            self._denials.clear()
        if recent:
            raise TransportAuthError(
                f"{what} on NATS at {self.address}: the server denied it to "
                f"{self.auth.describe()} ({recent[-1]}); each role may do its own part only "
                "(see the rlax-transport-nats README); check that this process has its "
                "role's credentials_file"
            )

    async def check_denied(self, what: str) -> None:
        """Like :meth:`raise_if_denied`, after a round trip: the server answers a PING
        after any error about what was sent before it, so none is missed."""
        with contextlib.suppress(Exception):
            await self.nc.flush(timeout=2)
        self.raise_if_denied(what)

    def call_retrying(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """Like :meth:`call`, but retries ``make()`` across reconnections.

        Args:
            what: the operation, for messages ("fetch of version 3").
            make: builds a fresh coroutine per attempt.
        """
        budget = self.config.reconnect_timeout_s
        return self.call(self.retrying(what, make), timeout=budget + 10)

    async def retrying(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """The loop-side retry of :meth:`call_retrying` (for use inside coroutines)."""
        deadline = self._loop.time() + self.config.reconnect_timeout_s
        delay = 0.05
        while True:
            try:
                return await make()
            except RETRYABLE as exc:
                self.raise_if_denied(what)
                if self._closed:
                    raise TransportClosedError(
                        f"the NATS connection to {self.address} is closed"
                    ) from None
                if self._loop.time() + delay >= deadline:
                    raise TransportUnreachableError(
                        f"{what} on NATS at {self.address} failed for "
                        f"{self.config.reconnect_timeout_s:.0f} s ({type(exc).__name__}: {exc}); "
                        "check that the server runs and is reachable (reconnect_timeout_s)"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    def close(self) -> None:
        """Closes the connection; blocked calls raise ``TransportClosedError``. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._inflight)
        for future in pending:
            future.cancel()
        with contextlib.suppress(Exception):  # the loop is going away regardless
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(8)
        self._stop_loop()

    # -- loop side --

    async def _connect(self) -> None:
        options: dict[str, Any] = {
            "servers": self.config.servers,
            "connect_timeout": self.config.connect_timeout_s,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.25,
            "ping_interval": 10,
            "max_outstanding_pings": 3,
            "error_cb": self._on_error,
            "reconnected_cb": self._on_reconnected,
            "name": f"rlax-{self.auth.role or 'client'}",
            "inbox_prefix": self.auth.inbox_prefix,
        }
        auth = self.auth
        if auth.user is not None:
            options.update(user=auth.user, password=auth.password)
        if auth.token is not None:
            options["token"] = auth.token
        if auth.nkey_seed_file is not None:
            if not auth.nkey_seed_file.is_file():
                raise TransportAuthError(f"nkey_seed_file {auth.nkey_seed_file} does not exist")
            options["nkeys_seed"] = str(auth.nkey_seed_file)
        if self.config.tls_ca_file is not None or self.config.tls_cert_file is not None:
            options["tls"] = self._tls_context()
        try:
            await asyncio.wait_for(self.nc.connect(**options), self.config.connect_timeout_s)
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            cause = self._auth_error or self._last_error or exc
            await self._close_client()
            raise self._connect_error(cause) from None

    def _tls_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(
                cafile=str(self.config.tls_ca_file) if self.config.tls_ca_file else None
            )
            if self.config.tls_cert_file is not None:
                context.load_cert_chain(
                    str(self.config.tls_cert_file), str(self.config.tls_key_file)
                )
        except (OSError, ssl.SSLError) as exc:
            raise TransportAuthError(
                f"cannot load the TLS files for NATS at {self.address}: {exc}; check "
                "tls_ca_file, tls_cert_file and tls_key_file"
            ) from None
        return context

    def _connect_error(self, cause: BaseException) -> RlaxError:
        text = f"{type(cause).__name__}: {cause}".strip()
        if isinstance(cause, nats.errors.AuthorizationError) or "uthorization" in text:
            return TransportAuthError(
                f"NATS at {self.address} refused {self.auth.describe()} ({text}); check "
                "credentials_file (or user/password, token, nkey_seed_file) against the "
                "server's authorization"
            )
        if isinstance(cause, ssl.SSLError) or "SSL" in text or "certificate" in text:
            return TransportAuthError(
                f"TLS with NATS at {self.address} failed ({text}); check tls_ca_file (the CA "
                "that signed the server's certificate) and that the URL uses tls://"
            )
        return TransportUnreachableError(
            f"cannot connect to NATS at {self.address} within "
            f"{self.config.connect_timeout_s:.1f} s ({text}); check that nats-server runs "
            "there (`rlax serve param-server --transport nats`) and the address is right"
        )

    async def _on_error(self, exc: Exception) -> None:
        if _DENIED in str(exc).lower():
            with self._lock:
                self._denials = [*self._denials[-9:], (time.monotonic(), str(exc))]
            return
        self._last_error = exc
        if isinstance(exc, nats.errors.AuthorizationError) or "uthorization" in str(exc):
            self._auth_error = exc

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        for listener in self._reconnect_listeners:
            try:
                await listener()
            except Exception as exc:  # a listener must not break the connection
                self._last_error = exc

    async def _close_client(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.close(), 3)

    async def _shutdown(self) -> None:
        await self._close_client()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 3)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


async def _quiet_when_cancelled(coro: Awaitable[T]) -> T:
    """Awaits ``coro``; if the caller gave up (cancelled), its last error is not logged.

    nats-py turns a cancellation into its own errors (e.g. ``ConnectionClosedError``);
    nobody will read those, and asyncio would log them as never retrieved.
    """
    try:
        return await coro
    except Exception:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise


def api_error(what: str, address: str, exc: BaseException) -> TransportError:
    """A JetStream API error as a TransportError naming the operation and server."""
    return TransportError(f"{what} on NATS at {address} failed: {type(exc).__name__}: {exc}")
