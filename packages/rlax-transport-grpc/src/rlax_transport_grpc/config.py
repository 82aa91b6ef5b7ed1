"""Settings of the ``grpc`` transport, shared by its clients and its server."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_core.kit.transport import NetworkTransportSettings


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
    max_workers: int = Field(
        default=64, ge=4, description="Threads serving calls (each blocked get holds one)."
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
        description="CA certificate (PEM) clients trust; set it to connect over TLS.",
    )
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
        return self

    @property
    def max_message_bytes(self) -> int:
        """The message-size limit of both sides: a chunk or an item, plus room for framing.

        gRPC's defaults (4 MiB received) would refuse a 4 MiB chunk with its header.
        """
        return (max(self.chunk_mb, self.max_item_mb) << 20) + (1 << 20)
