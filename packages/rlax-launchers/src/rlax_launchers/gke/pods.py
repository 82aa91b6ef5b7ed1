"""Pod templates of the run: one image, the role is the command.

Every pod reads the run config at :data:`CONFIG_PATH`. Without transport passwords or
tokens, that is the ConfigMap itself; with them, an init container
(:mod:`rlax_launchers.gke.config_merge`) writes the config and the Secret's credentials
into a memory-backed volume, so no secret ever sits in the ConfigMap. Credential files
(TLS, nkey seeds) are mounted from the Secret at :data:`SECRETS_DIR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlax_launchers.gke.config import GkeLauncherConfig

CONFIG_DIR = "/etc/rlax/run"
CONFIG_PATH = f"{CONFIG_DIR}/run.yaml"
BASE_CONFIG_DIR = "/etc/rlax/base"
SECRETS_DIR = "/etc/rlax/secrets"
CREDENTIALS_KEY = "credentials.yaml"


@dataclass(frozen=True)
class RunObjects:
    """Names and labels the run's objects share.

    Attributes:
        prefix: the resource-name prefix.
        config_map: the ConfigMap holding ``run.yaml``.
        secret: the Secret with transport credentials, if there are any.
        merge_credentials: the Secret holds passwords or tokens to merge into the config.
    """

    prefix: str
    config_map: str
    secret: str | None
    merge_credentials: bool

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
) -> dict[str, Any]:
    """A pod spec with the run config (and credentials) mounted.

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
