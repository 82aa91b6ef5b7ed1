"""A cloud run's transport credentials: a folder per role, mounted where its processes run.

Unless ``launcher.credentials.insecure`` is set, every cloud run's transport is closed:
TLS (the clients check the server's certificate, the server checks theirs), a
credential per role that the server limits to its role's part, and weights signed by
the trainer (see :mod:`rlax_core.transport.credentials`). The files come from
``rlax credentials``' layout, one folder per role and one for the server:

- ``trainer``, ``worker``, ``verifier``: ``credential`` (``ROLE:SECRET``), ``ca.pem``,
  ``client.pem`` and ``client-key.pem`` (mutual TLS), ``signing.pub``; the trainer's
  alone also ``signing-key.pem``;
- ``server``: ``server.pem``, ``server-key.pem``, ``ca.pem`` and
  ``credentials/ROLE``, every role's credential.

Each role's processes get their own folder at :data:`MOUNT_DIR` (never another role's),
and the run config's transport section names the files there
(core's ``transport_settings``), so the run config is the same for every role and
holds no secret. Where the files come from (``launcher.credentials``):

- by default, ``--apply`` generates them into ``launch/credentials`` of the local
  ``--run-dir`` (a folder of mode 700, the keys 600), once per run: a later ``--apply``
  (and ``--watch``) reuses them, since new ones would lock out the processes that hold
  the old. Remove the folder and launch again to rotate them;
- ``folder``: an existing folder of that layout (``rlax credentials DIR
  --server-host ...``); its server certificate must name the host the clients connect to;
- ``secrets`` (gke): Kubernetes Secrets that exist already, one per role and the server.

A dry run (``--dry-run``, or a cloud launch without ``--apply``) neither generates nor
reads any: it renders every file as :data:`PLACEHOLDER`, so nothing secret reaches the
terminal, and says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_core.errors import ConfigError
from rlax_core.kit.launcher import (
    FOLDERS,
    IDENTITY_FILES,
    SERVER,
    folder_files,
    generate_run_credentials,
    transport_settings,
)

GENERATED_SUBDIR = "launch/credentials"
"""Where ``--apply`` generates a run's credentials, under the local ``--run-dir``."""
PLACEHOLDER = (
    b"PLACEHOLDER: a dry run prints no secrets; `rlax launch CONFIG --apply` fills this "
    b"file with the run's credentials\n"
)
# Transport settings that name a credential of the process's own, wherever a transport
# has them: with per-run credentials, the launcher sets these.
_OWN_CREDENTIALS = (
    "user",
    "password",
    "token",
    "nkey_seed_file",
    "credentials_file",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "signing",
)
_OWN_SERVER_CREDENTIALS = ("tls_cert_file", "tls_key_file", "credentials_dir")


class RunCredentialsConfig(BaseModel):
    """Where a cloud run's transport credentials come from (see
    :mod:`rlax_launchers.run_credentials`)."""

    model_config = ConfigDict(extra="forbid")

    folder: str | None = Field(
        default=None,
        description="An existing folder of the run's credentials, as `rlax credentials DIR "
        "--server-host HOST` writes it (its server certificate must name the host clients "
        "connect to). Null: --apply generates them into launch/credentials of --run-dir, "
        "once per run.",
    )
    insecure: bool = Field(
        default=False,
        description="No per-run credentials: the transport section's own settings (a token, "
        "TLS files) or none, and the server started with --insecure. Anyone who reaches "
        "the transport's port can then publish weights; only on a network you trust.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RunCredentialsConfig:
        if self.insecure and self.folder is not None:
            raise ValueError(
                "insecure runs without per-run credentials, so folder would not be used: "
                "drop one of them"
            )
        return self


@dataclass(frozen=True)
class CredentialFiles:
    """The files of a run's credentials, by folder.

    Attributes:
        folders: ``trainer``, ``worker``, ``verifier`` and ``server`` → the path of each
            file inside its folder (``credentials/worker`` in the server's) → its bytes.
        placeholder: every file is :data:`PLACEHOLDER` (a dry run).
        source: where they were read, for messages.
    """

    folders: dict[str, dict[str, bytes]]
    placeholder: bool
    source: str

    def merged(self, *names: str) -> dict[str, bytes]:
        """The files of several folders in one (the trainer slice's hosts mount the
        trainer's and the server's at one path). Files in both must be the same, but for
        the client certificate and key: the first folder's say who the host connects as."""
        files: dict[str, bytes] = {}
        for name in names:
            for path, content in self.folders[name].items():
                if path in files and path in IDENTITY_FILES:
                    continue
                if path in files and files[path] != content:
                    raise ConfigError(
                        f"{self.source}: {path} differs between the {' and '.join(names)} "
                        "folders, which are mounted together; the folders are not one run's"
                    )
                files[path] = content
        return files


def placeholder_files() -> CredentialFiles:
    """Every file of the layout, each :data:`PLACEHOLDER` (what a dry run renders)."""
    folders = {name: dict.fromkeys(folder_files(name), PLACEHOLDER) for name in FOLDERS}
    return CredentialFiles(folders, placeholder=True, source="placeholders")


def read_credential_files(folder: Path) -> CredentialFiles:
    """Reads a run's credentials from ``folder`` (``rlax credentials``' layout).

    Raises:
        ConfigError: a file of the layout is missing or unreadable (all of them named).
    """
    folders: dict[str, dict[str, bytes]] = {}
    missing: list[str] = []
    for name in FOLDERS:
        folders[name] = {}
        for path in folder_files(name):
            try:
                folders[name][path] = (folder / name / path).read_bytes()
            except OSError:
                missing.append(f"{name}/{path}")
    if missing:
        raise ConfigError(
            f"launcher.credentials.folder {folder} lacks {', '.join(missing)}: it must hold "
            "the folders `rlax credentials DIR --server-host HOST` writes (trainer, worker, "
            "verifier, server); or drop launcher.credentials.folder and --apply generates them"
        )
    return CredentialFiles(folders, placeholder=False, source=str(folder))


def run_credentials_folder(
    config: RunCredentialsConfig, run_dir: Path, server_hosts: list[str]
) -> Path:
    """The folder of the run's credentials: ``config.folder``, else ``launch/credentials``
    of ``run_dir``, generated there (for ``server_hosts``) unless it holds them already.

    Raises:
        ConfigError: ``config.folder`` is not a folder.
    """
    if config.folder is not None:
        folder = Path(config.folder).expanduser()
        if not folder.is_dir():
            raise ConfigError(
                f"launcher.credentials.folder {config.folder} is not a folder; make one with "
                f"`rlax credentials {config.folder} --server-host {server_hosts[0]}`"
            )
        return folder
    folder = run_dir / GENERATED_SUBDIR
    if not (folder / SERVER).exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        generate_run_credentials(folder, server_hosts)
    return folder


def apply_secure_settings(transport: dict[str, Any]) -> None:
    """Fills a transport section (as a mapping) with the settings that read each role's
    folder where the launchers mount it (core's ``transport_settings``).

    Raises:
        ConfigError: the section names credentials of its own, which the per-run ones
            would silently replace (every such field named).
    """
    own = [f"transport.{name}" for name in _OWN_CREDENTIALS if transport.get(name) is not None]
    server = transport.get("server")
    if isinstance(server, dict):
        own += [
            f"transport.server.{name}"
            for name in _OWN_SERVER_CREDENTIALS
            if server.get(name) is not None
        ]
    if own:
        raise ConfigError(
            f"{', '.join(own)} {'is' if len(own) == 1 else 'are'} set, but the launcher gives "
            "the run credentials of its own (TLS, a credential per role, signed weights; see "
            "launcher.credentials): drop them, or set launcher.credentials.insecure: true to "
            "use the transport section's own settings instead"
        )
    settings = transport_settings()
    server_settings = settings.pop("server")
    transport.update(settings)
    transport["server"] = {**(server if isinstance(server, dict) else {}), **server_settings}
