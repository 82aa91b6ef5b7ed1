"""A client's channel to the parameter server: credentials, retries, errors.

Every call carries the process's credential (its role's ``ROLE:SECRET`` from
``credentials_file`` or ``$RLAX_TRANSPORT_CREDENTIALS``, else the shared ``token``) and
the namespace as metadata, and a deadline. A call that finds the server unreachable (it
restarted, or the network blinked) is retried with backoff for up to
``reconnect_timeout_s``, as is one the server refused as busy (after the delay it
asked for); every other failure becomes the specific
:class:`~rlax_core.errors.RlaxError` that names the server and what to check.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import grpc.experimental

from rlax_core.errors import (
    ChecksumMismatchError,
    LeaseExpiredError,
    ManifestError,
    RlaxError,
    TransportAuthError,
    TransportClosedError,
    TransportError,
    TransportUnreachableError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.kit.transport import read_credential, reuse_transfer_buffers
from rlax_transport_grpc.access import HOLDER_KEY
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.limits import (
    ERROR_KIND_KEY,
    RETRY_AFTER_KEY,
    QuotaExceededError,
    ServerBusyError,
)
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.proto import rlax_transport_pb2_grpc as pb_grpc
from rlax_transport_grpc.server import PARAMS, channel_options
from rlax_transport_grpc.service import NAMESPACE_KEY

T = TypeVar("T")

_RETRYABLE = {grpc.StatusCode.UNAVAILABLE}
_BY_STATUS: dict[grpc.StatusCode, type[TransportError]] = {
    grpc.StatusCode.NOT_FOUND: VersionNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: VersionConflictError,
    grpc.StatusCode.FAILED_PRECONDITION: LeaseExpiredError,
    grpc.StatusCode.DATA_LOSS: ChecksumMismatchError,
}


class GrpcChannel:
    """One channel to the parameter server, shared by a process's store and queues.

    Args:
        config: the transport settings.

    Raises:
        TransportAuthError: the server refused the token, or TLS failed.
        TransportUnreachableError: the server did not answer within ``connect_timeout_s``.
    """

    def __init__(self, config: GrpcTransportConfig) -> None:
        self.config = config
        self.address = config.address
        self._closed = False
        reuse_transfer_buffers()  # every fetched chunk arrives as a fresh bytes
        # Server streams (fetch, watch) are read on the calling thread rather than through
        # gRPC's channel spin thread: no thread hop per chunk, and no received chunk is
        # kept alive by that thread while the next one arrives.
        options = [
            *channel_options(config),
            (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
        ]
        role = read_credential(config.credentials_file)  # ConfigError: a bad file
        self.credential = role.line() if role is not None else (config.token or "")
        if config.tls_ca_file is not None:
            files = {"tls_ca_file": config.tls_ca_file}
            if config.tls_cert_file is not None and config.tls_key_file is not None:
                files |= {
                    "tls_cert_file": config.tls_cert_file,
                    "tls_key_file": config.tls_key_file,
                }
            pems: dict[str, bytes] = {}
            for field, path in files.items():
                try:
                    pems[field] = path.read_bytes()
                except OSError as exc:
                    raise TransportAuthError(f"cannot read {field}: {exc}") from None
            credentials = grpc.ssl_channel_credentials(
                root_certificates=pems["tls_ca_file"],
                private_key=pems.get("tls_key_file"),
                certificate_chain=pems.get("tls_cert_file"),
            )
            self.channel = grpc.secure_channel(config.address, credentials, options)
        else:
            self.channel = grpc.insecure_channel(config.address, options)
        # Leases are granted to this channel's id: no other client can end them.
        metadata = [(NAMESPACE_KEY, config.namespace), (HOLDER_KEY, secrets.token_urlsafe(16))]
        if self.credential:
            metadata.append(("authorization", f"Bearer {self.credential}"))
        self.metadata = tuple(metadata)
        self.params = pb_grpc.ParameterServerStub(self.channel)
        self.queues = pb_grpc.QueuesStub(self.channel)
        # The bulk methods move raw frames (see wire.py), not protobuf objects.
        self.fetch_frames = self.channel.unary_stream(
            f"/{PARAMS}/Fetch", request_serializer=pb.FetchRequest.SerializeToString
        )
        self.publish_frames = self.channel.stream_unary(
            f"/{PARAMS}/Publish", response_deserializer=pb.Manifest.FromString
        )
        try:
            self.server_info = self.call(
                "connecting", lambda timeout: self.params.Ping(pb.Empty(), **self.kw(timeout)),
                budget=config.connect_timeout_s,
            )  # fmt: skip
        except BaseException:
            self.channel.close()
            raise

    def kw(self, timeout: float | None) -> dict[str, Any]:
        """The keyword arguments of every call: deadline (None: none) and metadata."""
        return {"timeout": timeout, "metadata": self.metadata}

    def call(
        self,
        what: str,
        attempt: Callable[[float], T],
        *,
        budget: float | None = None,
        retry_busy: bool = True,
    ) -> T:
        """Runs ``attempt(deadline_s)``, retrying while the server is unreachable or busy.

        Args:
            what: the operation, for messages.
            attempt: makes the call with the given per-call deadline in seconds.
            budget: seconds to keep retrying (default ``reconnect_timeout_s``).
            retry_busy: retry a call the server refused as busy (False: raise
                ServerBusyError, for a caller that polls anyway).
        """
        budget = self.config.reconnect_timeout_s if budget is None else budget
        deadline = time.monotonic() + budget
        delay = 0.05
        while True:
            self.check_open()
            try:
                return attempt(max(budget, 1.0) + 30.0)
            except grpc.RpcError as exc:
                if exc.code() in _RETRYABLE and time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                error = self.translate(exc, what, budget)
                if (
                    isinstance(error, ServerBusyError)
                    and retry_busy
                    and time.monotonic() + error.retry_after_s < deadline
                ):
                    time.sleep(error.retry_after_s)
                    continue
                raise error from None

    def translate(self, exc: grpc.RpcError, what: str, budget: float = 0.0) -> RlaxError:
        """The RlaxError for a failed call."""
        code, details = exc.code(), exc.details() or ""
        trailing = dict(_trailing(exc))
        if self._closed or code == grpc.StatusCode.CANCELLED:
            return TransportClosedError(
                f"{what}: the channel to the gRPC parameter server at {self.address} was closed"
            )
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return TransportAuthError(
                f"the gRPC parameter server at {self.address} refused {what} ({details}); "
                "check that the transport's credentials_file (or token) is one the server "
                "accepts"
            )
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return TransportAuthError(
                f"the gRPC parameter server at {self.address} refused {what}: {details}"
            )
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            if RETRY_AFTER_KEY in trailing:
                delay = (
                    int(trailing[RETRY_AFTER_KEY]) / 1000
                    if trailing[RETRY_AFTER_KEY].isdigit()
                    else 0.2
                )
                return ServerBusyError(f"{what}: {details}", retry_after_s=min(delay, 5.0))
            return QuotaExceededError(
                f"the gRPC parameter server at {self.address} refused {what}: {details}"
            )
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            kind = (
                ManifestError if trailing.get(ERROR_KIND_KEY) == "ManifestError" else TransportError
            )
            return kind(f"the gRPC parameter server at {self.address} refused {what}: {details}")
        if code in _BY_STATUS:
            return _BY_STATUS[code](details)
        if code == grpc.StatusCode.UNAVAILABLE:
            lowered = details.lower()
            if any(word in lowered for word in ("ssl", "handshake", "certificate", "tls")):
                return TransportAuthError(
                    f"TLS with the gRPC parameter server at {self.address} failed ({details}); "
                    "check tls_ca_file (the CA that signed the server's certificate)"
                )
            return TransportUnreachableError(
                f"{what}: the gRPC parameter server at {self.address} was unreachable for "
                f"{budget:.0f} s ({details}); check that `rlax serve param-server --transport "
                "grpc` runs there and the address is right"
            )
        return TransportError(
            f"{what} on the gRPC parameter server at {self.address} failed: {code.name}: {details}"
        )

    def check_open(self) -> None:
        """Raises ``TransportClosedError`` after :meth:`close`."""
        if self._closed:
            raise TransportClosedError(
                f"the channel to the gRPC parameter server at {self.address} is closed"
            )

    def close(self) -> None:
        """Closes the channel; calls in flight end with ``TransportClosedError``."""
        if not self._closed:
            self._closed = True
            self.channel.close()


def _trailing(exc: grpc.RpcError) -> tuple[tuple[str, str], ...]:
    trailing = getattr(exc, "trailing_metadata", None)
    try:
        return tuple((str(k), str(v)) for k, v in (trailing() or ())) if trailing else ()
    except Exception:  # a failure without metadata (e.g. raised before any reply)
        return ()


def chunk_frames(tensor: int, data: memoryview, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """``(tensor, start, end)`` of each chunk of one tensor (an empty tensor has one)."""
    return [
        (tensor, start, min(start + chunk_bytes, len(data)))
        for start in range(0, max(len(data), 1), chunk_bytes)
    ]


__all__ = ["GrpcChannel", "chunk_frames"]
