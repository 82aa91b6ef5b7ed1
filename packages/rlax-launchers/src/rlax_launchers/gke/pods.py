"""Pod templates of the run: one image, the role is the command.

Every pod reads the run config at :data:`CONFIG_PATH`, the ConfigMap itself. Each role's
pods mount their own Secret of the run's credentials read-only at :data:`MOUNT_DIR`
(the trainer's, the workers', the verifiers', the transport server's; see
:mod:`rlax_launchers.run_credentials`), which the config names. A run that opts out of
them (``credentials.insecure``) may bring transport passwords or tokens of its own: then
an init container (:mod:`rlax_launchers.gke.config_merge`) writes the config and the
Secret's credentials into a memory-backed volume, so no secret ever sits in the
ConfigMap, and its credential files (TLS, nkey seeds) are mounted from that Secret at
:data:`SECRETS_DIR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlax_core.kit.launcher import MOUNT_DIR
from rlax_launchers.gke.config import GkeLauncherConfig
from rlax_launchers.run_credentials import folder_files

CONFIG_DIR = "/etc/rlax/run"
CONFIG_PATH = f"{CONFIG_DIR}/run.yaml"
BASE_CONFIG_DIR = "/etc/rlax/base"
SECRETS_DIR = "/etc/rlax/secrets"
CREDENTIALS_KEY = "credentials.yaml"
TRANSPORT_CREDENTIALS_VOLUME = "transport-credentials"


@dataclass(frozen=True)
class RunObjects:
    """Names and labels the run's objects share.

    Attributes:
        prefix: the resource-name prefix.
        config_map: the ConfigMap holding ``run.yaml``.
        secret: the Secret with transport credentials, if there are any.
        merge_credentials: the Secret holds passwords or tokens to merge into the config.
        role_secrets: the Secret of each folder of the run's credentials (``trainer``,
            ``worker``, ``verifier``, ``server``), mounted by that role's pods; None for
            a run without per-run credentials.
    """

    prefix: str
    config_map: str
    secret: str | None
    merge_credentials: bool
    role_secrets: dict[str, str] | None = None

    def labels(self, component: str) -> dict[str, str]:
        """The labels of every object of the run's ``component``."""
        return {
            "app.kubernetes.io/name": "rlax",
            "app.kubernetes.io/instance": self.prefix,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/managed-by": "rlax",
        }

    def selector(self) -> str:
        """Label selector of all the run's pods."""
        return f"app.kubernetes.io/instance={self.prefix}"


def container(
    config: GkeLauncherConfig,
    *,
    name: str,
    command: list[str],
    env: list[dict[str, Any]] | None = None,
    ports: list[dict[str, Any]] | None = None,
    resources: dict[str, Any] | None = None,
    extra_mounts: list[dict[str, Any]] | None = None,
    objects: RunObjects,
) -> dict[str, Any]:
    """A container of the RLAX image running one role."""
    spec: dict[str, Any] = {
        "name": name,
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": command,
        "volumeMounts": [*_config_mounts(objects), *(extra_mounts or [])],
    }
    if env:
        spec["env"] = env
    if ports:
        spec["ports"] = ports
    if resources:
        spec["resources"] = resources
    return spec


def pod_spec(
    config: GkeLauncherConfig,
    objects: RunObjects,
    *,
    containers: list[dict[str, Any]],
    priority_class: str,
    restart_policy: str,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    extra_volumes: list[dict[str, Any]] | None = None,
    spot: bool = False,
    credentials: str | None = None,
) -> dict[str, Any]:
    """A pod spec with the run config (and credentials) mounted.

    ``credentials`` names the folder of the run's credentials its containers mount at
    :data:`MOUNT_DIR` (``trainer``, ``worker``, ``verifier`` or ``server``), when the run
    has them; no pod gets another role's.

    Every pod names its ServiceAccount (:func:`service_account_name`): with Workload
    Identity, that is the identity its bucket access is granted to. A pod on Spot nodes
    (``spot``) gets the grace period GKE honours there (``config.spot_grace_s``); other
    pods get ``termination_grace_period_s``, which covers a trainer's checkpoint.
    """
    grace = config.spot_grace_s if spot else config.termination_grace_period_s
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "priorityClassName": priority_class,
        "serviceAccountName": service_account_name(config),
        "terminationGracePeriodSeconds": grace,
        "containers": containers,
        "volumes": [*_config_volumes(objects), *(extra_volumes or [])],
    }
    if credentials is not None and objects.role_secrets is not None:
        spec["volumes"].append(_credentials_volume(objects.role_secrets[credentials], credentials))
        for each in containers:
            each["volumeMounts"].append(
                {"name": TRANSPORT_CREDENTIALS_VOLUME, "mountPath": MOUNT_DIR, "readOnly": True}
            )
    if objects.merge_credentials:
        spec["initContainers"] = [_merge_container(config, objects)]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def service_account_name(config: GkeLauncherConfig) -> str:
    """The Kubernetes ServiceAccount the run's pods run as (the namespace's ``default``
    when the config names none)."""
    return config.service_account or "default"


def secret_key(path: str) -> str:
    """The Secret key of a file of a credentials folder (``credentials/worker`` →
    ``credentials.worker``: a key may not hold ``/``)."""
    return path.replace("/", ".")


def _credentials_volume(secret: str, folder: str) -> dict[str, Any]:
    # The items put the server's credentials.ROLE keys at credentials/ROLE, and make a
    # Secret that lacks a file of the folder fail the pod's start, not the process.
    items = [{"key": secret_key(p), "path": p} for p in folder_files(folder)]
    return {
        "name": TRANSPORT_CREDENTIALS_VOLUME,
        "secret": {"secretName": secret, "defaultMode": 0o400, "items": items},
    }


def _merge_container(config: GkeLauncherConfig, objects: RunObjects) -> dict[str, Any]:
    return {
        "name": "run-config",
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": [
            "python",
            "-m",
            "rlax_launchers.gke.config_merge",
            f"{BASE_CONFIG_DIR}/run.yaml",
            f"{SECRETS_DIR}/{CREDENTIALS_KEY}",
            CONFIG_PATH,
        ],
        "volumeMounts": [
            {"name": "base-config", "mountPath": BASE_CONFIG_DIR, "readOnly": True},
            {"name": "credentials", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "run-config", "mountPath": CONFIG_DIR},
        ],
    }


def _config_mounts(objects: RunObjects) -> list[dict[str, Any]]:
    mounts = [{"name": "run-config", "mountPath": CONFIG_DIR, "readOnly": True}]
    if objects.secret is not None:
        mounts.append({"name": "credentials", "mountPath": SECRETS_DIR, "readOnly": True})
    return mounts


def _config_volumes(objects: RunObjects) -> list[dict[str, Any]]:
    config_map = {"name": objects.config_map}
    if not objects.merge_credentials:
        volumes = [{"name": "run-config", "configMap": config_map}]
    else:
        volumes = [
            {"name": "base-config", "configMap": config_map},
            # Memory-backed: the merged config holds the credentials.
            {"name": "run-config", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        ]
    if objects.secret is not None:
        volumes.append(
            {"name": "credentials", "secret": {"secretName": objects.secret, "defaultMode": 0o400}}
        )
    return volumes
