"""The settings every transport's config shares, so each is described once.

A transport plugin's config class subclasses :class:`TransportSettings` (in-process and
networked alike: how many versions are kept, how queue items are delivered) or
:class:`NetworkTransportSettings` (a client of a server: its namespace and how long it
waits for the server), and adds its own fields.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.transport.signing import SigningSettings


class TransportSettings(BaseModel):
    """Retention of policy versions and the delivery rules of the queues."""

    model_config = ConfigDict(extra="forbid")

    keep_versions: int = Field(
        default=2, ge=1, description="Policy versions the parameter store retains."
    )
    dedupe_window_s: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds an acked item id is remembered, so a duplicate put is ignored.",
    )
    max_deliveries: int | None = Field(
        default=None,
        ge=1,
        description="Drop a queue item after this many deliveries without an ack (null: never).",
    )


class NetworkTransportSettings(TransportSettings):
    """A transport whose clients reach a server: their namespace and their patience."""

    namespace: str = Field(
        default="rlax",
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Runs that share a server keep apart by namespace.",
    )
    connect_timeout_s: float = Field(
        default=5.0, gt=0, description="Seconds to reach the server the first time."
    )
    reconnect_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a call waits for an unreachable server to come back before failing.",
    )
    credentials_file: Path | None = Field(
        default=None,
        description="File holding this process's ROLE:SECRET credential (the file a launcher "
        "mounts per role; null: $RLAX_TRANSPORT_CREDENTIALS, else none). The server gives "
        "each role its part only (see rlax_core.transport.credentials).",
    )
    signing: SigningSettings | None = Field(
        default=None,
        description="The run's weight-signing keys: the trainer signs every version, readers "
        "verify each before use (null: versions are checksummed, not signed).",
    )
