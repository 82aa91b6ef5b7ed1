"""The run config as the processes of a cloud run read it.

The launcher's copy of the config is rewritten for the cluster: the ``launcher`` section
is dropped (the processes launch nothing), ``run.run_dir`` is the shared run directory,
the transport points at the host its server was placed on, and its credentials are the
run's: either the per-run credentials each role mounts (``secure``, the default of the
cloud launchers: the transport section names their files, see
:mod:`rlax_launchers.run_credentials`), or, for a run that opts out of them, the
transport section's own, split out so they can travel as secrets: passwords and tokens
(``inline``) and the files that TLS certificates and nkey seeds are read from (``files``,
read here and shipped to ``secrets_dir`` on the hosts, where the config then points).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError
from rlax_launchers.run_credentials import apply_secure_settings
from rlax_launchers.transport_placement import TransportPlacement

# Transport settings that are secrets, by name, wherever a transport has them.
INLINE_CREDENTIALS = ("user", "password", "token")
CREDENTIAL_FILES = ("tls_ca_file", "tls_cert_file", "tls_key_file", "nkey_seed_file")


@dataclass
class ClusterRunConfig:
    """The processes' run config and the credentials taken out of it.

    Attributes:
        settings: the run config as a mapping, ready to be written as YAML.
        inline_credentials: transport settings removed from ``settings`` (empty unless
            asked for), e.g. ``{"token": "..."}``.
        credential_files: secret name → file content; ``settings`` points at
            ``secrets_dir/<name>``.
    """

    settings: dict[str, Any]
    inline_credentials: dict[str, str] = field(default_factory=dict)
    credential_files: dict[str, bytes] = field(default_factory=dict)

    def yaml(self) -> str:
        """``settings`` as a YAML document."""
        return run_config_yaml(self.settings)


def cluster_run_config(
    run_config: RunConfigBase,
    *,
    run_dir: str,
    placement: TransportPlacement,
    transport_host: str,
    secrets_dir: str,
    split_inline_credentials: bool,
    secure: bool = False,
) -> ClusterRunConfig:
    """Rewrites ``run_config`` for processes on other hosts (see the module docstring).

    Args:
        run_config: the validated run config.
        run_dir: the run directory every process shares.
        placement: where the transport server is.
        transport_host: the host name (or placeholder) the clients connect to.
        secrets_dir: where credential files are placed on the hosts.
        split_inline_credentials: move passwords and tokens to ``inline_credentials``.
        secure: the run's processes mount per-run credentials: the transport section
            names their files (:func:`~rlax_launchers.run_credentials.apply_secure_settings`)
            and must name no credentials of its own.

    Raises:
        ConfigError: a credential file named in the transport section cannot be read, or
            (``secure``) the section names credentials of its own.
    """
    settings = run_config.model_dump(mode="json", exclude={"launcher"})
    settings["run"]["run_dir"] = run_dir
    transport = settings["transport"]
    transport.update(placement.client_settings(transport_host))
    result = ClusterRunConfig(settings)
    if secure:
        apply_secure_settings(transport)
        return result
    if split_inline_credentials:
        for name in INLINE_CREDENTIALS:
            if transport.get(name) is not None:
                result.inline_credentials[name] = transport.pop(name)
    sections = (("transport", transport), ("transport.server", transport.get("server")))
    for prefix, section in sections:
        if not isinstance(section, dict):
            continue
        for name in CREDENTIAL_FILES:
            local = section.get(name)
            if local is None:
                continue
            key = f"{prefix}.{name}"
            result.credential_files[key] = _read_credential(Path(local), key)
            section[name] = f"{secrets_dir}/{key}"
    return result


def merge_inline_credentials(settings: dict[str, Any], credentials: dict[str, Any]) -> None:
    """Puts credentials split out by :func:`cluster_run_config` back into ``settings``."""
    settings.setdefault("transport", {}).update(credentials)


def run_config_yaml(settings: dict[str, Any]) -> str:
    """A run config mapping as YAML, in the order its sections were written."""
    return yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)


def _read_credential(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{key} is {str(path)!r}, which cannot be read here ({exc.strerror}); the launcher "
            "ships credential files to the hosts as secrets, so they must exist where you run "
            "`rlax launch`"
        ) from None
