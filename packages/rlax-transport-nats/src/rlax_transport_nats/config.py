"""Settings of the ``nats`` transport, shared by its clients and ``rlax serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_core.kit.transport import NetworkTransportSettings


class NatsServerSettings(BaseModel):
    """How ``rlax serve param-server --transport nats`` starts a nats-server, when none runs."""

    model_config = ConfigDict(extra="forbid")

    store_dir: Path | None = Field(
        default=None,
        description="JetStream store folder (null: a temporary folder, deleted on stop).",
    )
    tls_cert_file: Path | None = Field(
        default=None, description="Server certificate (PEM) to serve TLS with."
    )
    tls_key_file: Path | None = Field(default=None, description="Private key of tls_cert_file.")
    max_payload_mb: int = Field(
        default=16,
        ge=1,
        le=64,
        description="Largest message the server accepts, in MiB (nats-server's max_payload).",
    )
    monitoring_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of nats-server's HTTP monitoring endpoint (/varz, /jsz), on the "
        "address it listens on, for an autoscaler that reads a queue's backlog (null: off).",
    )
    credentials_dir: Path | None = Field(
        default=None,
        description="Folder with one ROLE:SECRET file per role (trainer, worker, verifier), as "
        "`rlax credentials DIR` writes in DIR/server/credentials: the server lets each role in "
        "with its own secret and gives it its part only (see the README's permission table). "
        "Null: the token, user/password or nkey of the transport settings, with every right.",
    )
    verify_clients: bool = Field(
        default=False,
        description="Mutual TLS: refuse clients without a certificate signed by "
        "tls_ca_file (nats-server's tls { verify: true }); clients set tls_cert_file.",
    )
    max_lease_s: float = Field(
        default=86400.0,
        gt=0,
        description="With credentials_dir, how long a client may answer (ack, extend, hand "
        "back) an item it was handed: the longest lease any role takes.",
    )

    @model_validator(mode="after")
    def _tls_is_complete(self) -> NatsServerSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("server.tls_cert_file and server.tls_key_file go together")
        if self.verify_clients and self.tls_cert_file is None:
            raise ValueError("server.verify_clients needs server.tls_cert_file and tls_key_file")
        return self


class NatsTransportConfig(NetworkTransportSettings):
    """Parameter store and queues on NATS JetStream; processes may run on any hosts."""

    servers: list[str] = Field(
        default_factory=lambda: ["nats://127.0.0.1:4222"],
        min_length=1,
        description="NATS server URLs (nats:// or tls://); the client fails over between them.",
    )
    chunk_mb: int = Field(
        default=8,
        ge=1,
        le=63,
        description="Size of one weight chunk message in MiB (capped by the server's max_payload).",
    )
    weight_storage: Literal["file", "memory"] = Field(
        default="file",
        description=(
            "Where JetStream keeps the weights: file (they survive a server restart) or "
            "memory (faster fetches; a server restart empties the store until the next publish)."
        ),
    )
    lease_tick_s: float = Field(
        default=5.0,
        gt=0,
        description="JetStream ack wait: a preempted consumer's lease ends at most this late.",
    )
    user: str | None = Field(default=None, description="User name (with password).")
    password: str | None = Field(default=None, description="Password of user.")
    token: str | None = Field(default=None, description="Authentication token.")
    nkey_seed_file: Path | None = Field(
        default=None, description="File holding this client's nkey seed (SU...)."
    )
    tls_ca_file: Path | None = Field(
        default=None, description="CA certificate (PEM) that signed the server's certificate."
    )
    tls_cert_file: Path | None = Field(
        default=None, description="Client certificate (PEM), where the server asks for one."
    )
    tls_key_file: Path | None = Field(default=None, description="Private key of tls_cert_file.")
    max_weights_gb: float = Field(
        default=16.0,
        gt=0,
        description="Most bytes the weight stream may hold, in GB (10^9 bytes): keep_versions "
        "+ 1 versions are stored at once while one is published; past it a publish is refused. "
        "JetStream reserves it when the stream is made, so the server's store must have room.",
    )
    max_queue_items: int = Field(
        default=1_000_000, ge=1, description="Most items one queue holds; past it a put is refused."
    )
    max_queue_gb: float = Field(
        default=1.0,
        gt=0,
        description="Most bytes one queue holds, in GB (10^9 bytes); past it a put is refused.",
    )
    max_dead_letters: int = Field(
        default=100_000,
        ge=1,
        description="Dead-letter notices kept per queue (the oldest go first).",
    )
    server: NatsServerSettings = Field(
        default_factory=NatsServerSettings,
        description="Used only by `rlax serve` when it starts a nats-server itself.",
    )

    @model_validator(mode="after")
    def _credentials_are_complete(self) -> NatsTransportConfig:
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password go together; set both or neither")
        chosen = [
            name
            for name, value in (
                ("user/password", self.user),
                ("token", self.token),
                ("nkey_seed_file", self.nkey_seed_file),
                ("credentials_file", self.credentials_file),
            )
            if value is not None
        ]
        if len(chosen) > 1:
            raise ValueError(f"choose one way to authenticate, not {' and '.join(chosen)}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        lab = [n for n in ("token", "user", "nkey_seed_file") if getattr(self, n) is not None]
        if self.server.credentials_dir is not None and lab:
            raise ValueError(
                f"server.credentials_dir gives each role its own credential; {lab[0]} would be "
                "a second way in with every right: use credentials_file in the clients instead"
            )
        return self

    @property
    def address(self) -> str:
        """The server URLs as one string, for messages."""
        return ", ".join(self.servers)
