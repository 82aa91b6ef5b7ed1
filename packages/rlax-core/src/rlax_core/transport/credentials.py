"""A run's transport credentials: one per role, enforced by the server.

Whoever can write to the parameter store decides the weights every worker samples with,
and whoever can put to the rollout queue decides what the trainer learns from, so each
role gets its own credential and the server lets it do its role's part only:

- ``trainer``: publishes weights, manages streams and queues, puts prompts, takes
  rollouts (the controller runs in the trainer's process);
- ``worker``: reads weights, leases prompts, puts to the to-verify and rollout queues;
- ``verifier``: reads weights (for its version checks), leases what is to verify, puts
  rollouts.

A credential is one line, ``ROLE:SECRET``, read from a file (``credentials_file`` in a
transport's config; the file a launcher mounts per role) or from the environment
(:data:`CREDENTIALS_ENV`), never from the command line. The server reads every role's
line from a folder holding one file per role (``server.credentials_dir``).

:func:`generate_run_credentials` makes everything a run needs in one folder, a
sub-folder per role holding exactly what that role's processes mount at
:data:`MOUNT_DIR` (its credential, the CA, a client certificate for mutual TLS, the
public key that signs weights, and, for the trainer alone, the signing key), and one for
the server (its certificate, every role's credential, a client certificate for its own
connections and the public signing key). ``rlax credentials DIR`` runs
it; the launchers run it per run.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlax_core.errors import ConfigError, TransportAuthError
from rlax_core.rl.roles.queues import PROMPTS, ROLLOUTS, TO_VERIFY
from rlax_core.transport.certificates import issue_certificate, make_authority, write_private

Role = Literal["trainer", "worker", "verifier"]
ROLES: tuple[Role, ...] = ("trainer", "worker", "verifier")
QUEUE_RIGHTS: dict[str, tuple[frozenset[Role], frozenset[Role]]] = {
    PROMPTS: (frozenset({"trainer"}), frozenset({"worker"})),
    TO_VERIFY: (frozenset({"worker"}), frozenset({"verifier"})),
    ROLLOUTS: (frozenset({"worker", "verifier"}), frozenset({"trainer"})),
}
"""Each queue of a run: (the roles that put to it, the roles that lease from it). Every
transport that enforces roles enforces exactly these."""

CREDENTIALS_ENV = "RLAX_TRANSPORT_CREDENTIALS"
"""Environment variable holding a process's ``ROLE:SECRET`` (used when no file is set)."""

MOUNT_DIR = "/etc/rlax/credentials"
"""Where a launcher mounts a role's (or the server's) folder in its processes."""

# The files of a role's folder, and of the server's.
CREDENTIAL_FILE = "credential"
CA_FILE = "ca.pem"
CLIENT_CERT_FILE = "client.pem"
CLIENT_KEY_FILE = "client-key.pem"
SERVER_CERT_FILE = "server.pem"
SERVER_KEY_FILE = "server-key.pem"
SIGNING_PUBLIC_FILE = "signing.pub"
SIGNING_PRIVATE_FILE = "signing-key.pem"
SERVER_CREDENTIALS_DIR = "credentials"  # in the server's folder: one file per role
SERVER = "server"
FOLDERS = (*ROLES, SERVER)
"""The folders of a run's credentials: each role's, then the server's."""
IDENTITY_FILES = (CLIENT_CERT_FILE, CLIENT_KEY_FILE)
"""The files that say who connects: where two folders are mounted together, the first
folder's are the host's."""


def folder_files(folder: str) -> list[str]:
    """The files :func:`generate_run_credentials` writes in one folder (a role's or
    :data:`SERVER`), as paths inside it: what a launcher mounts."""
    shared = [CA_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE, SIGNING_PUBLIC_FILE]
    if folder == SERVER:
        own = [SERVER_CERT_FILE, SERVER_KEY_FILE]
        return [*own, *shared, *(f"{SERVER_CREDENTIALS_DIR}/{role}" for role in ROLES)]
    files = [CREDENTIAL_FILE, *shared]
    return [*files, SIGNING_PRIVATE_FILE] if folder == "trainer" else files


def transport_settings(mount: str = MOUNT_DIR) -> dict[str, Any]:
    """The transport settings that read a folder mounted at ``mount`` (each role's, or the
    server's): TLS both ways, the role's credential, the signing keys, and the server's
    side of each."""
    return {
        "credentials_file": f"{mount}/{CREDENTIAL_FILE}",
        "tls_ca_file": f"{mount}/{CA_FILE}",
        "tls_cert_file": f"{mount}/{CLIENT_CERT_FILE}",
        "tls_key_file": f"{mount}/{CLIENT_KEY_FILE}",
        "signing": {
            "public_key_file": f"{mount}/{SIGNING_PUBLIC_FILE}",
            # In the trainer's folder alone; only a publisher reads it, when it first signs.
            "private_key_file": f"{mount}/{SIGNING_PRIVATE_FILE}",
        },
        "server": {
            "tls_cert_file": f"{mount}/{SERVER_CERT_FILE}",
            "tls_key_file": f"{mount}/{SERVER_KEY_FILE}",
            "credentials_dir": f"{mount}/{SERVER_CREDENTIALS_DIR}",
            "verify_clients": True,
        },
    }


@dataclass(frozen=True)
class RoleCredential:
    """A role's name and secret.

    Attributes:
        role: which role it proves.
        secret: the random part (URL-safe text).
    """

    role: Role
    secret: str

    def line(self) -> str:
        """``ROLE:SECRET``, as files and the environment hold it."""
        return f"{self.role}:{self.secret}"

    def matches(self, presented: str) -> bool:
        """Whether ``presented`` (a ``ROLE:SECRET`` line) is this credential, compared in
        constant time."""
        return hmac.compare_digest(presented.encode(), self.line().encode())

    def __repr__(self) -> str:  # never print the secret
        return f"RoleCredential(role={self.role!r}, secret=…)"


def parse_credential(text: str, source: str) -> RoleCredential:
    """Reads a ``ROLE:SECRET`` line.

    Raises:
        ConfigError: not one line of that form, an unknown role, or a secret too short
            to resist guessing (fewer than 16 characters).
    """
    line = text.strip()
    role, sep, secret = line.partition(":")
    if not sep or "\n" in line:
        raise ConfigError(f"{source}: a credential is one line, ROLE:SECRET (e.g. worker:…)")
    if role not in ROLES:
        raise ConfigError(f"{source}: unknown role {role!r}; roles are {', '.join(ROLES)}")
    if len(secret) < 16:
        raise ConfigError(
            f"{source}: the secret is {len(secret)} characters; use at least 16 random ones "
            "(`rlax credentials DIR` makes them)"
        )
    return RoleCredential(role, secret)  # type: ignore[arg-type]


def read_credential(path: Path | None) -> RoleCredential | None:
    """This process's credential: from ``path`` if given, else from
    :data:`CREDENTIALS_ENV`, else None.

    Raises:
        ConfigError: the file is missing, unreadable or malformed (see
            :func:`parse_credential`).
    """
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(
                f"credentials_file {path}: cannot be read ({exc.strerror}); each role's "
                f"processes need their own credential there (`rlax credentials DIR`)"
            ) from None
        return parse_credential(text, str(path))
    value = os.environ.get(CREDENTIALS_ENV)
    return parse_credential(value, f"${CREDENTIALS_ENV}") if value else None


def read_server_credentials(folder: Path) -> dict[Role, RoleCredential]:
    """Every role's credential the server accepts: one file per role in ``folder``.

    Raises:
        ConfigError: the folder is missing, a file is malformed or names another role,
            or no role has a credential.
    """
    if not Path(folder).is_dir():
        raise ConfigError(
            f"server.credentials_dir {folder}: no such folder; it holds one file per role "
            f"({', '.join(ROLES)}), as `rlax credentials DIR` writes in DIR/server/credentials"
        )
    found: dict[Role, RoleCredential] = {}
    for role in ROLES:
        path = Path(folder) / role
        if path.exists():
            credential = parse_credential(path.read_text(), str(path))
            if credential.role != role:
                raise ConfigError(f"{path}: holds the {credential.role}'s credential")
            found[role] = credential
    if not found:
        raise ConfigError(f"server.credentials_dir {folder}: holds no role's credential")
    return found


def authenticate(presented: str | None, accepted: dict[Role, RoleCredential], what: str) -> Role:
    """The role a presented ``ROLE:SECRET`` proves.

    Raises:
        TransportAuthError: nothing presented, or it matches no accepted credential.
    """
    if presented:
        role = presented.partition(":")[0]
        credential = accepted.get(role)  # type: ignore[call-overload]
        if credential is not None and credential.matches(presented):
            return credential.role
    raise TransportAuthError(f"{what}: {'wrong' if presented else 'no'} credential")


@dataclass(frozen=True)
class RunCredentials:
    """The folders :func:`generate_run_credentials` wrote.

    Attributes:
        folder: the top folder (the CA's key stays here, mounted nowhere).
        roles: each role's folder, what its processes mount at :data:`MOUNT_DIR`.
        server: the server's folder, what the transport server mounts there.
    """

    folder: Path
    roles: dict[Role, Path]
    server: Path


def generate_run_credentials(
    folder: Path, server_hosts: list[str], *, valid_days: int = 365
) -> RunCredentials:
    """Writes a run's credentials into ``folder`` (which must not hold any yet).

    Args:
        folder: where to write (created).
        server_hosts: the DNS names and IPs clients reach the server at (its
            certificate's names), e.g. ``["rlax-demo-transport", "localhost"]``.
        valid_days: how long the certificates are valid.

    Raises:
        ConfigError: ``folder`` already holds credentials (new ones would lock out the
            run's processes that hold the old), or no server host is given.
    """
    folder = Path(folder)
    if (folder / SERVER).exists():
        raise ConfigError(
            f"{folder} holds credentials already; remove it to make new ones (running "
            "processes keep the old ones until restarted with the new)"
        )
    if not server_hosts:
        raise ConfigError("the server's certificate needs at least one host name or IP")
    from rlax_core.transport.signing import generate_signing_key

    authority = make_authority("rlax run CA", valid_days=valid_days)
    ca_pem = authority.certificate_pem()
    write_private(folder / "ca-key.pem", authority.key_pem())
    private_pem, public_pem = generate_signing_key()
    server = folder / SERVER
    # Its own processes reach it on loopback (a NATS server making the run's streams).
    hosts = list(dict.fromkeys([*server_hosts, "localhost", "127.0.0.1"]))
    issue_certificate(
        authority, server_hosts[0], hosts=hosts, server=True, valid_days=valid_days
    ).write(_fresh(server / SERVER_CERT_FILE), server / SERVER_KEY_FILE)
    (server / CA_FILE).write_bytes(ca_pem)
    # The server's own clients (a NATS server making the run's streams) connect under
    # mutual TLS too, with the config's client paths, which its folder also holds.
    issue_certificate(authority, SERVER, client=True, valid_days=valid_days).write(
        server / CLIENT_CERT_FILE, server / CLIENT_KEY_FILE
    )
    (server / SIGNING_PUBLIC_FILE).write_bytes(public_pem)
    roles: dict[Role, Path] = {}
    for role in ROLES:
        own = folder / role
        credential = RoleCredential(role, secrets.token_urlsafe(32))
        write_private(own / CREDENTIAL_FILE, credential.line().encode() + b"\n")
        write_private(server / SERVER_CREDENTIALS_DIR / role, credential.line().encode() + b"\n")
        (own / CA_FILE).write_bytes(ca_pem)
        issue_certificate(authority, role, client=True, valid_days=valid_days).write(
            own / CLIENT_CERT_FILE, own / CLIENT_KEY_FILE
        )
        (own / SIGNING_PUBLIC_FILE).write_bytes(public_pem)
        if role == "trainer":
            write_private(own / SIGNING_PRIVATE_FILE, private_pem)
        roles[role] = own
    return RunCredentials(folder, roles, server)


def _fresh(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
