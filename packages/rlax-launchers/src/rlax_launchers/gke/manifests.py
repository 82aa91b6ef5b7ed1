"""Every Kubernetes object of a GKE run, in the order they are applied.

PriorityClasses, the pods' ServiceAccount (when the launcher creates it), the Secrets of
the run's transport credentials (one per role and one for the server, unless the config
names Secrets that exist; see :mod:`rlax_launchers.run_credentials`), the ConfigMap with
the run config, the transport server, its Service and NetworkPolicy, the JobSet, then the
verifiers (a Deployment on CPU nodes, and its KEDA ScaledObject, when the run judges in
a stage).

The Secrets' data is what :func:`render_manifests` is given: the files ``--apply``
generated or read, or, for a dry run, :data:`~rlax_launchers.run_credentials.PLACEHOLDER`
in every file, so printed manifests never hold a secret.

Every pod runs as one Kubernetes ServiceAccount, through which Workload Identity lets
it read and write the run's bucket: either Workload Identity Federation for GKE, an IAM
binding on the bucket for the ServiceAccount itself
(``principal://iam.googleapis.com/projects/PROJECT_NUMBER/locations/global/
workloadIdentityPools/PROJECT_ID.svc.id.goog/subject/ns/NAMESPACE/sa/KSA``), or the
older binding to a Google service account, named in the ServiceAccount's
``iam.gke.io/gcp-service-account`` annotation (``gcp_service_account``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError
from rlax_launchers.cluster_config import cluster_run_config, run_config_yaml
from rlax_launchers.gke.config import GkeLauncherConfig, PriorityClassConfig
from rlax_launchers.gke.jobset import jobset
from rlax_launchers.gke.pods import (
    CREDENTIALS_KEY,
    SECRETS_DIR,
    RunObjects,
    secret_key,
    service_account_name,
)
from rlax_launchers.gke.transport import transport_objects, transport_service_name
from rlax_launchers.gke.verifiers import verifier_monitoring_port, verifier_objects
from rlax_launchers.run_credentials import FOLDERS, CredentialFiles, placeholder_files
from rlax_launchers.run_identity import resource_prefix, shared_run_dir
from rlax_launchers.tpu_slice import check_trainer_mesh
from rlax_launchers.transport_placement import transport_placement


@dataclass(frozen=True)
class GkeManifests:
    """The rendered objects of a run.

    Attributes:
        objects: the names and labels they share.
        items: the manifests, in apply order.
    """

    objects: RunObjects
    items: list[dict[str, Any]]


def run_objects(config: GkeLauncherConfig, run_config: RunConfigBase) -> RunObjects:
    """The names of the run's objects, without rendering them (for status and stop)."""
    prefix = resource_prefix(run_config, config.name)
    return RunObjects(prefix, f"{prefix}-config", None, False, role_secrets(config, prefix))


def role_secrets(config: GkeLauncherConfig, prefix: str) -> dict[str, str] | None:
    """The Secret of each folder of the run's credentials (None: the run has none)."""
    if config.credentials.insecure:
        return None
    if config.credentials.secrets is not None:
        return config.credentials.secrets.model_dump()
    return {folder: f"{prefix}-{folder}-credentials" for folder in FOLDERS}


def render_manifests(
    config: GkeLauncherConfig,
    run_config: RunConfigBase,
    credentials: CredentialFiles | None = None,
) -> GkeManifests:
    """Renders the run's objects.

    Args:
        config: the launcher section.
        run_config: the run config.
        credentials: the run's credentials, the data of the Secrets the launcher renders
            (None: placeholders, as a dry run shows them; unused when the config names
            Secrets that exist, or the run has no credentials).

    Raises:
        ConfigError: the run cannot be placed (a name, the run directory, the transport,
            workers that do not fill whole slices, or verifiers the run cannot use), or
            its transport section names credentials the per-run ones would replace.
    """
    prefix = resource_prefix(run_config, config.name)
    secure = not config.credentials.insecure
    trainer, workers = config.trainer.shape(), config.workers.shape()
    check_trainer_mesh(run_config, trainer)
    run_dir = shared_run_dir(
        run_config, config.run_dir, launcher="gke", trainer_hosts=trainer.hosts
    )
    placement = transport_placement(run_config, "gke", tls=secure)
    if run_config.rollout.workers % workers.hosts:
        raise ConfigError(
            f"rollout.workers is {run_config.rollout.workers}, but each worker slice "
            f"({workers.accelerator_type}) has {workers.hosts} hosts, one worker pod each: make "
            f"rollout.workers a multiple of {workers.hosts}, or use a smaller worker slice"
        )
    cluster = cluster_run_config(
        run_config,
        run_dir=run_dir,
        placement=placement,
        transport_host=transport_service_name(prefix),
        secrets_dir=SECRETS_DIR,
        split_inline_credentials=True,
        secure=secure,
    )
    secret_data: dict[str, bytes] = dict(cluster.credential_files)
    if cluster.inline_credentials:
        secret_data[CREDENTIALS_KEY] = run_config_yaml(cluster.inline_credentials).encode()
    objects = RunObjects(
        prefix=prefix,
        config_map=f"{prefix}-config",
        secret=f"{prefix}-credentials" if secret_data else None,
        merge_credentials=bool(cluster.inline_credentials),
        role_secrets=role_secrets(config, prefix),
    )
    items: list[dict[str, Any]] = []
    if config.create_priority_classes:
        items.append(_priority_class(config.trainer_priority, "the trainer and its transport"))
        items.append(
            _priority_class(config.worker_priority, "inference workers and verifiers", never=True)
        )
    if config.create_service_account:
        items.append(_service_account(config))
    if objects.secret is not None:
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _metadata(config, objects, objects.secret, "credentials"),
                "type": "Opaque",
                "data": {k: base64.b64encode(v).decode() for k, v in sorted(secret_data.items())},
            }
        )
    if objects.role_secrets is not None and config.credentials.secrets is None:
        files = credentials or placeholder_files()
        for folder in FOLDERS:
            items.append(_credentials_secret(config, objects, folder, files))
    items.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(config, objects, objects.config_map, "config"),
            "data": {"run.yaml": cluster.yaml()},
        }
    )
    items += transport_objects(
        config, objects, placement, monitoring_port=verifier_monitoring_port(config, run_config)
    )
    items.append(
        jobset(
            config,
            objects,
            run_dir=run_dir,
            trainer=trainer,
            workers=workers,
            worker_slices=run_config.rollout.workers // workers.hosts,
        )
    )
    items += verifier_objects(config, objects, run_config, run_dir=run_dir)
    return GkeManifests(objects, items)


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """One object as a YAML document (no anchors: kubectl and humans read it plainly)."""
    return yaml.dump(manifest, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _priority_class(
    priority: PriorityClassConfig, what: str, *, never: bool = False
) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": priority.name,
            "labels": {"app.kubernetes.io/name": "rlax", "app.kubernetes.io/managed-by": "rlax"},
        },
        "value": priority.value,
        "globalDefault": False,
        "description": f"RLAX {what}.",
    }
    if never:
        # Workers wait for room rather than evict anyone.
        manifest["preemptionPolicy"] = "Never"
    return manifest


def _service_account(config: GkeLauncherConfig) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": service_account_name(config),
        "namespace": config.namespace,
        # Shared by the runs of the namespace (their IAM binding names it): no run's label.
        "labels": {"app.kubernetes.io/name": "rlax", "app.kubernetes.io/managed-by": "rlax"},
    }
    if config.gcp_service_account is not None:
        metadata["annotations"] = {"iam.gke.io/gcp-service-account": config.gcp_service_account}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}


def _credentials_secret(
    config: GkeLauncherConfig, objects: RunObjects, folder: str, files: CredentialFiles
) -> dict[str, Any]:
    assert objects.role_secrets is not None
    component = "transport" if folder == "server" else folder
    metadata = _metadata(config, objects, objects.role_secrets[folder], component)
    if files.placeholder:
        metadata["annotations"] = {
            "rlax/credentials": "placeholders: `rlax launch CONFIG --apply` generates the "
            "run's credentials and fills this Secret with them"
        }
    data = {secret_key(path): content for path, content in files.folders[folder].items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
    }


def _metadata(
    config: GkeLauncherConfig, objects: RunObjects, name: str, component: str
) -> dict[str, Any]:
    return {"name": name, "namespace": config.namespace, "labels": objects.labels(component)}
