"""How a client proves who it is to nats-server, and which inbox it listens on.

Two kinds of setup:

* **A credential per role** (``credentials_file`` or ``$RLAX_TRANSPORT_CREDENTIALS``,
  a ``ROLE:SECRET`` line): the client logs in as the NATS user named by its role with the
  secret as password, and the server (``server.credentials_dir``, see
  :mod:`~rlax_transport_nats.permissions`) gives that user its role's subjects only. The
  client's reply subjects live under ``_INBOX.<role>``, the only inboxes its role may
  subscribe to, so no client of one role can read another role's deliveries.
* **A lab setup** (``token``, ``user``/``password`` or ``nkey_seed_file``): one credential
  with every right, as a trusted single-tenant cluster uses it. Such a client may create
  streams like a trainer.

Only the trainer (and a lab client) creates and changes streams; the other roles wait
for them (:attr:`ClientAuth.manages_streams`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlax_core.kit.transport import Role, read_credential
from rlax_transport_nats.config import NatsTransportConfig

INBOX = "_INBOX"


@dataclass(frozen=True)
class ClientAuth:
    """What a client presents at CONNECT.

    Attributes:
        role: the role its credential proves (None: a lab credential, or none at all).
        user / password / token / nkey_seed_file: at most one way to log in.
    """

    role: Role | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_seed_file: Path | None = None

    @property
    def manages_streams(self) -> bool:
        """Whether this client creates and updates streams (the trainer, or a lab client)."""
        return self.role in (None, "trainer")

    @property
    def inbox_prefix(self) -> str:
        """The prefix of this client's reply subjects (per role, where it has one)."""
        return INBOX if self.role is None else f"{INBOX}.{self.role}"

    def describe(self) -> str:
        """Which credential this is, for messages (never the secret)."""
        if self.role is not None:
            return f"the {self.role}'s credential"
        if self.token is not None:
            return "the token"
        if self.user is not None:
            return f"user {self.user!r}"
        if self.nkey_seed_file is not None:
            return f"the nkey in {self.nkey_seed_file}"
        return "no credential"


def client_auth(config: NatsTransportConfig) -> ClientAuth:
    """The credential a client of ``config`` logs in with.

    The token, user/password and nkey settings win; else ``credentials_file``, else
    ``$RLAX_TRANSPORT_CREDENTIALS``, else none.

    Raises:
        ConfigError: the credential file or variable is unreadable or malformed.
    """
    if config.token is not None:
        return ClientAuth(token=config.token)
    if config.user is not None:
        return ClientAuth(user=config.user, password=config.password)
    if config.nkey_seed_file is not None:
        return ClientAuth(nkey_seed_file=config.nkey_seed_file)
    credential = read_credential(config.credentials_file)
    if credential is None:
        return ClientAuth()
    return ClientAuth(role=credential.role, user=credential.role, password=credential.secret)
