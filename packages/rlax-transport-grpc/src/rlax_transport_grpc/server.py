"""The gRPC parameter server: ``rlax serve param-server --transport grpc``.

One ``grpc.server`` with the ParameterServer and Queues services of
rlax_transport.proto, a bearer-token check on every call, optional TLS, and message
limits raised to one chunk plus its frame (gRPC's 4 MiB default refuses a 4 MiB chunk).
"""

from __future__ import annotations

import hmac
import shutil
import ssl
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from rlax_core.contracts.transport import TransportServer
from rlax_core.errors import RlaxError
from rlax_core.kit.transport import reuse_transfer_buffers
from rlax_transport_grpc import wire
from rlax_transport_grpc.bulk import BulkSender
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.proto import rlax_transport_pb2 as pb
from rlax_transport_grpc.service import TransportService

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


class _BearerToken(grpc.ServerInterceptor):
    """Refuses every call whose ``authorization`` metadata is not ``Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation: Callable, details: Any) -> Any:
        handler = continuation(details)
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if handler is None or hmac.compare_digest(given.encode(), self._expected):
            return handler
        message = "missing bearer token" if not given else "wrong bearer token"

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        kind = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return kind(deny, handler.request_deserializer, handler.response_serializer)


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
        self._service = service = TransportService(Path(state_dir), self.config)
        interceptors = [_BearerToken(self.config.token)] if self.config.token else []
        server = grpc.server(
            ThreadPoolExecutor(self.config.server.max_workers, thread_name_prefix="rlax-grpc"),
            options=channel_options(self.config),
            interceptors=interceptors,
        )
        server.add_generic_rpc_handlers(_handlers(service))
        try:
            if self.config.server.tls_cert_file is not None:
                credentials = grpc.ssl_server_credentials(
                    [
                        (
                            self.config.server.tls_key_file.read_bytes(),
                            self.config.server.tls_cert_file.read_bytes(),
                        )
                    ]
                )
                port = server.add_secure_port(self.config.address, credentials)
            else:
                port = server.add_insecure_port(self.config.address)
            if self.config.server.bulk_port is not None:
                service.bulk = BulkSender(
                    self.config.address.rsplit(":", 1)[0],
                    self.config.server.bulk_port,
                    self._bulk_tls(),
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
        return context

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


def _handlers(service: TransportService) -> tuple[grpc.GenericRpcHandler, ...]:
    unary = grpc.unary_unary_rpc_method_handler
    params = {
        "Ping": unary(service.ping, pb.Empty.FromString, pb.ServerInfo.SerializeToString),
        "Publish": grpc.stream_unary_rpc_method_handler(
            service.publish, wire.decode_publish_frame, pb.Manifest.SerializeToString
        ),
        "GetManifest": unary(
            service.get_manifest, pb.VersionRequest.FromString, pb.Manifest.SerializeToString
        ),
        "ListVersions": unary(
            service.list_versions, pb.Empty.FromString, pb.VersionList.SerializeToString
        ),
        "Fetch": grpc.unary_stream_rpc_method_handler(
            service.fetch, pb.FetchRequest.FromString, _identity
        ),
        "WatchVersions": grpc.unary_stream_rpc_method_handler(
            service.watch_versions, pb.VersionRequest.FromString, pb.Manifest.SerializeToString
        ),
        "OpenBulkFetch": unary(
            service.open_bulk_fetch, pb.FetchRequest.FromString, pb.BulkTicket.SerializeToString
        ),
    }
    queues = {
        "OpenQueue": unary(
            service.open_queue, pb.OpenQueueRequest.FromString, pb.Empty.SerializeToString
        ),
        "Put": unary(service.put, pb.PutRequest.FromString, pb.PutReply.SerializeToString),
        "Get": unary(service.get, pb.GetRequest.FromString, pb.LeaseReply.SerializeToString),
        "Ack": unary(service.ack, pb.LeaseRef.FromString, pb.Empty.SerializeToString),
        "Nack": unary(service.nack, pb.LeaseRef.FromString, pb.Empty.SerializeToString),
        "Extend": unary(
            service.extend, pb.ExtendRequest.FromString, pb.LeaseReply.SerializeToString
        ),
        "Stats": unary(service.stats, pb.QueueRef.FromString, pb.StatsReply.SerializeToString),
    }
    return (
        grpc.method_handlers_generic_handler(PARAMS, params),
        grpc.method_handlers_generic_handler(QUEUES, queues),
    )
