"""Settings of the ``grpc`` transport, shared by its clients and its server."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_core.kit.transport import ManifestLimits, NetworkTransportSettings

# Threads always left for short calls (Ping, Publish, puts, acks) whatever waits.
RESERVED_WORKERS = 8


class GrpcServerSettings(BaseModel):
    """What only the parameter server (``rlax serve param-server --transport grpc``) reads."""

    model_config = ConfigDict(extra="forbid")

    state_dir: Path | None = Field(
        default=None,
        description="Folder holding the retained versions, so a restarted server keeps them "
        "(null: a temporary folder, deleted on stop).",
    )
    tls_cert_file: Path | None = Field(default=None, description="Server certificate (PEM).")
    tls_key_file: Path | None = Field(default=None, description="Private key of tls_cert_file.")
    credentials_dir: Path | None = Field(
        default=None,
        description="Folder of the roles' credentials, one file per role (trainer, worker, "
        "verifier), as `rlax credentials DIR` writes in DIR/server/credentials: every call "
        "must present one, and each role may do its part only (null: no roles; `token`, if "
        "set, is then the one credential, with every right).",
    )
    verify_clients: bool = Field(
        default=False,
        description="Mutual TLS: clients must present a certificate signed by tls_ca_file "
        "(their tls_cert_file/tls_key_file), on the gRPC and the bulk port.",
    )
    max_workers: int = Field(
        default=64, ge=16, description="Threads serving calls (each waiting call holds one)."
    )
    max_waiting_calls: int = Field(
        default=32,
        ge=1,
        description="Calls that may wait at once (gets with a timeout, version watches); "
        "more are told the server is busy and retry, so waiting never starves the rest.",
    )
    max_fetch_streams: int = Field(
        default=16,
        ge=1,
        description="Weight fetches streamed through gRPC at once (more retry shortly).",
    )
    max_bulk_connections: int = Field(
        default=16, ge=1, description="Connections to the bulk port at once (more are closed)."
    )
    max_lease_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="Longest lease granted; a get or extend asking for more (or for a lease "
        "that is not a positive finite number) is refused.",
    )
    max_wait_s: float = Field(
        default=30.0, gt=0, description="Longest a get waits for an item in one call."
    )
    max_namespaces: int = Field(
        default=64, ge=1, description="Namespaces the server holds (only trainers make new ones)."
    )
    max_queues: int = Field(default=32, ge=3, description="Queues in one namespace.")
    max_queue_items: int = Field(
        default=1_000_000, ge=1, description="Items queued or leased in one queue."
    )
    max_queue_mb: int = Field(
        default=1024,
        ge=1,
        description="MiB of queued and leased payloads in one queue (held in memory).",
    )
    manifest_limits: ManifestLimits = Field(
        default_factory=ManifestLimits,
        description="What one published version may hold (tensors, bytes); the server also "
        "refuses a version its disk has no room for.",
    )
    bulk_port: int | None = Field(
        default=0,
        ge=0,
        le=65535,
        description="TCP port beside the gRPC one where fetches get their bytes without "
        "copies (0: any free port; null: none, fetches stream through gRPC).",
    )


class GrpcTransportConfig(NetworkTransportSettings):
    """Parameter server and queues as one gRPC service, run with `rlax serve param-server`."""

    address: str = Field(
        default="127.0.0.1:50051",
        pattern=r"^[^:\s]+:\d+$",
        description="host:port of the parameter server (the server listens there).",
    )
    chunk_mb: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Size of one weight chunk message in MiB (1 MiB streamed fastest in "
        "`rlax bench transport`).",
    )
    max_item_mb: int = Field(
        default=16, ge=1, le=1024, description="Largest queue item payload in MiB."
    )
    token: str | None = Field(
        default=None,
        description="Bearer token sent with (clients) or required of (server) every call.",
    )
    tls_ca_file: Path | None = Field(
        default=None,
        description="CA certificate (PEM) clients trust; set it to connect over TLS (with "
        "server.verify_clients, the server checks client certificates against it too).",
    )
    tls_cert_file: Path | None = Field(
        default=None, description="Client certificate (PEM) for mutual TLS."
    )
    tls_key_file: Path | None = Field(default=None, description="Private key of tls_cert_file.")
    bulk_fetch: bool = Field(
        default=True,
        description="Fetch weights over the server's bulk port when it has one (falls back "
        "to the gRPC stream when the port cannot be reached).",
    )
    server: GrpcServerSettings = Field(
        default_factory=GrpcServerSettings, description="Read only by the server."
    )

    @model_validator(mode="after")
    def _tls_files_go_together(self) -> GrpcTransportConfig:
        if (self.server.tls_cert_file is None) != (self.server.tls_key_file is None):
            raise ValueError("server.tls_cert_file and server.tls_key_file go together")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.tls_cert_file is not None and self.tls_ca_file is None:
            raise ValueError("tls_cert_file (mutual TLS) needs tls_ca_file")
        if self.server.verify_clients and (
            self.server.tls_cert_file is None or self.tls_ca_file is None
        ):
            raise ValueError(
                "server.verify_clients needs server.tls_cert_file/tls_key_file and "
                "tls_ca_file (the CA that signed the client certificates)"
            )
        spare = self.server.max_workers - self.server.max_waiting_calls
        if spare - self.server.max_fetch_streams < RESERVED_WORKERS:
            raise ValueError(
                f"server.max_waiting_calls ({self.server.max_waiting_calls}) plus "
                f"server.max_fetch_streams ({self.server.max_fetch_streams}) must leave "
                f"{RESERVED_WORKERS} of server.max_workers ({self.server.max_workers}) free "
                "for short calls"
            )
        return self

    @property
    def max_message_bytes(self) -> int:
        """The message-size limit of both sides: a chunk or an item, plus room for framing.

        gRPC's defaults (4 MiB received) would refuse a 4 MiB chunk with its header.
        """
        return (max(self.chunk_mb, self.max_item_mb) << 20) + (1 << 20)
