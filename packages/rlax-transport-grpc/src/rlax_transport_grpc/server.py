"""The gRPC parameter server: ``rlax serve param-server --transport grpc``.

One ``grpc.server`` with the ParameterServer and Queues services of
rlax_transport.proto: a credential and role check on every call (access.py), TLS and
optionally mutual TLS, message limits raised to one chunk plus its frame (gRPC's 4 MiB
default refuses a 4 MiB chunk), and every handler guarded so that a request that does
not parse or passes a bound ends with a status and a message, never a traceback.
"""

from __future__ import annotations

import functools
import shutil
import ssl
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from rlax_core.contracts.transport import ServerSecurity, TransportServer
from rlax_core.errors import (
    ChecksumMismatchError,
    LeaseExpiredError,
    ManifestError,
    RlaxError,
    TransportAuthError,
    VersionConflictError,
    VersionNotFoundError,
)
from rlax_core.kit.transport import reuse_transfer_buffers
from rlax_transport_grpc import wire
from rlax_transport_grpc.access import AccessInterceptor, Gatekeeper, RoleDeniedError
from rlax_transport_grpc.bulk import BulkSender
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.limits import (
    ERROR_KIND_KEY,
    RETRY_AFTER_KEY,
    QuotaExceededError,
    ServerBusyError,
)
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.service import MALFORMED, TransportService

PARAMS = "rlax.transport.v1.ParameterServer"
QUEUES = "rlax.transport.v1.Queues"


def channel_options(config: GrpcTransportConfig) -> list[tuple[str, Any]]:
    """Options both sides use: message limits sized to the chunks, prompt reconnects."""
    limit = config.max_message_bytes
    return [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        # Keep-alive pings find a dead peer within ~30 s, so bulk streams need no
        # deadline (a 100 GB fetch may take longer than any fixed one).
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
    ]


class GrpcParameterServer(TransportServer):
    """Serves one state folder on ``config.address`` until :meth:`stop`.

    Args:
        config: the transport settings; ``config.server`` holds the server-only ones.
    """

    def __init__(self, config: GrpcTransportConfig) -> None:
        self.config = config
        self._server: grpc.Server | None = None
        self._service: TransportService | None = None
        self._temporary: Path | None = None

    @property
    def address(self) -> str:
        return self.config.address

    def start(self) -> None:
        if self._server is not None:
            return
        reuse_transfer_buffers()  # every published chunk arrives as a fresh bytes
        state_dir = self.config.server.state_dir
        if state_dir is None:
            self._temporary = state_dir = Path(tempfile.mkdtemp(prefix="rlax-grpc-"))
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        gatekeeper = Gatekeeper(self.config)  # ConfigError: the credentials folder
        self._service = service = TransportService(Path(state_dir), self.config, gatekeeper)
        settings = self.config.server
        server = grpc.server(
            ThreadPoolExecutor(settings.max_workers, thread_name_prefix="rlax-grpc"),
            options=channel_options(self.config),
            interceptors=[AccessInterceptor(gatekeeper)],
        )
        server.add_generic_rpc_handlers(_handlers(service))
        try:
            if settings.tls_cert_file is not None:
                client_ca = None
                if settings.verify_clients and self.config.tls_ca_file is not None:
                    client_ca = self.config.tls_ca_file.read_bytes()
                credentials = grpc.ssl_server_credentials(
                    [(settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())],
                    root_certificates=client_ca,
                    require_client_auth=settings.verify_clients,
                )
                port = server.add_secure_port(self.config.address, credentials)
            else:
                port = server.add_insecure_port(self.config.address)
            if settings.bulk_port is not None:
                service.bulk = BulkSender(
                    self.config.address.rsplit(":", 1)[0],
                    settings.bulk_port,
                    self._bulk_tls(),
                    gatekeeper=gatekeeper,
                    max_connections=settings.max_bulk_connections,
                )
        except (OSError, RuntimeError, ssl.SSLError) as exc:
            raise RlaxError(
                f"the gRPC parameter server cannot listen on {self.config.address}: {exc}; "
                "check the TLS files and that the port is free"
            ) from None
        if port == 0:
            raise RlaxError(
                f"the gRPC parameter server cannot listen on {self.config.address}; is the "
                "port taken?"
            )
        server.start()
        self._server = server

    def _bulk_tls(self) -> ssl.SSLContext | None:
        settings = self.config.server
        if settings.tls_cert_file is None or settings.tls_key_file is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        if settings.verify_clients and self.config.tls_ca_file is not None:
            context.load_verify_locations(cafile=str(self.config.tls_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def security(self) -> ServerSecurity:
        return ServerSecurity(
            host=self.config.address.rsplit(":", 1)[0],
            authenticated=bool(self.config.server.credentials_dir or self.config.token),
            encrypted=self.config.server.tls_cert_file is not None,
        )

    def load(self) -> dict[str, int]:
        service = self._service
        return {} if service is None else service.load()

    def running(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            if self._service is not None:
                if self._service.bulk is not None:
                    self._service.bulk.close()
                self._service.close()  # wakes version watchers
            server.stop(grace=1.0).wait(5)
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None


def _identity(frame: bytes) -> bytes:
    return frame


# Each deliberate error, as the status a client sees and the RlaxError it raises again.
_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (RoleDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (TransportAuthError, grpc.StatusCode.UNAUTHENTICATED),
    (ServerBusyError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (QuotaExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ManifestError, grpc.StatusCode.INVALID_ARGUMENT),
    (VersionConflictError, grpc.StatusCode.ALREADY_EXISTS),
    (VersionNotFoundError, grpc.StatusCode.NOT_FOUND),
    (LeaseExpiredError, grpc.StatusCode.FAILED_PRECONDITION),
    (ChecksumMismatchError, grpc.StatusCode.DATA_LOSS),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (TypeError, grpc.StatusCode.INVALID_ARGUMENT),
)


def _abort(context: grpc.ServicerContext, exc: Exception) -> None:
    """Ends the call with the status for ``exc`` and its message."""
    code = next((code for kind, code in _STATUS if isinstance(exc, kind)), None)
    if code is None:  # OSError (a full disk), an RlaxError of another kind
        code = grpc.StatusCode.INTERNAL
        print(f"rlax: a call failed on the server: {exc!r}", file=sys.stderr, flush=True)
    trailing = [(ERROR_KIND_KEY, type(exc).__name__)]
    if isinstance(exc, ServerBusyError):
        trailing.append((RETRY_AFTER_KEY, str(int(exc.retry_after_s * 1000))))
    context.set_trailing_metadata(tuple(trailing))
    context.abort(code, str(exc) or type(exc).__name__)


_DELIBERATE = (RlaxError, ValueError, TypeError, OSError)


def _guarded(behavior: Callable) -> Callable:
    """``behavior`` with malformed requests refused and deliberate errors as statuses."""

    @functools.wraps(behavior)
    def run(request: Any, context: grpc.ServicerContext) -> Any:
        if request is MALFORMED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request does not parse")
        try:
            return behavior(request, context)
        except _DELIBERATE as exc:
            _abort(context, exc)

    return run


def _guarded_stream(behavior: Callable) -> Callable:
    """:func:`_guarded` for a handler whose reply is a stream."""

    @functools.wraps(behavior)
    def run(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if request is MALFORMED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request does not parse")
        try:
            yield from behavior(request, context)
        except _DELIBERATE as exc:
            _abort(context, exc)

    return run


def _parsed(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """A request parser that never raises: what does not parse becomes MALFORMED."""

    def parse_or_mark(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception:  # DecodeError, or a frame cut short (IndexError, struct.error)
            return MALFORMED

    return parse_or_mark


def _handlers(service: TransportService) -> tuple[grpc.GenericRpcHandler, ...]:
    def unary(behavior: Callable, request: Any, reply: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            _guarded(behavior), _parsed(request.FromString), reply.SerializeToString
        )

    def streaming(behavior: Callable, request: Any, serialize: Callable) -> Any:
        return grpc.unary_stream_rpc_method_handler(
            _guarded_stream(behavior), _parsed(request.FromString), serialize
        )

    params = {
        "Ping": unary(service.ping, pb.Empty, pb.ServerInfo),
        "Publish": grpc.stream_unary_rpc_method_handler(
            _guarded(service.publish),
            _parsed(wire.decode_publish_frame),
            pb.Manifest.SerializeToString,
        ),
        "GetManifest": unary(service.get_manifest, pb.VersionRequest, pb.Manifest),
        "ListVersions": unary(service.list_versions, pb.Empty, pb.VersionList),
        "Fetch": streaming(service.fetch, pb.FetchRequest, _identity),
        "WatchVersions": streaming(
            service.watch_versions, pb.VersionRequest, pb.Manifest.SerializeToString
        ),
        "OpenBulkFetch": unary(service.open_bulk_fetch, pb.FetchRequest, pb.BulkTicket),
    }
    queues = {
        "OpenQueue": unary(service.open_queue, pb.OpenQueueRequest, pb.Empty),
        "Put": unary(service.put, pb.PutRequest, pb.PutReply),
        "Get": unary(service.get, pb.GetRequest, pb.LeaseReply),
        "Ack": unary(service.ack, pb.LeaseRef, pb.Empty),
        "Nack": unary(service.nack, pb.LeaseRef, pb.Empty),
        "Extend": unary(service.extend, pb.ExtendRequest, pb.LeaseReply),
        "Stats": unary(service.stats, pb.QueueRef, pb.StatsReply),
    }
    return (
        grpc.method_handlers_generic_handler(PARAMS, params),
        grpc.method_handlers_generic_handler(QUEUES, queues),
    )
