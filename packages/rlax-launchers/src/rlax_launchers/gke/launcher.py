"""The ``gke`` launcher: renders a run's Kubernetes objects and applies, watches, deletes them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, get_args

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts import Launcher, ProcessRole, ProcessStatus, RenderedArtifact
from rlax_core.errors import RlaxError
from rlax_core.plugins.registry import BuildContext
from rlax_launchers.gke.apply import Cluster
from rlax_launchers.gke.config import GkeLauncherConfig
from rlax_launchers.gke.jobset_controller import check_jobset_controller, failure_policy_actions
from rlax_launchers.gke.manifests import manifest_yaml, render_manifests, run_objects
from rlax_launchers.gke.pods import service_account_name
from rlax_launchers.gke.transport import transport_server_hosts, transport_service_name
from rlax_launchers.gke.verifiers import verifier_deployment_name
from rlax_launchers.run_credentials import (
    GENERATED_SUBDIR,
    CredentialFiles,
    read_credential_files,
    run_credentials_folder,
)
from rlax_launchers.run_identity import resource_prefix

_PHASES = {
    "Pending": "starting",
    "Running": "running",
    "Succeeded": "stopped",
    "Failed": "failed",
    "Unknown": "failed",
}


class GkeLauncher(Launcher):
    """Places a run on a GKE cluster as a JobSet (see :mod:`rlax_launchers.gke.jobset`),
    its verifiers as a Deployment on CPU nodes (see :mod:`rlax_launchers.gke.verifiers`).

    Args:
        config: the launcher section of the run config.
        run_config: the run config, which names the objects for :meth:`status` and
            :meth:`stop`.
    """

    creates_cloud_resources = True

    def __init__(self, config: GkeLauncherConfig, run_config: RunConfigBase | None = None) -> None:
        self.config = config
        self.run_config = run_config

    def render(self, run_config: RunConfigBase, run_dir: Path) -> list[RenderedArtifact]:
        """Every object as a YAML manifest, in apply order.

        Nothing secret is generated or read: the Secrets of the run's credentials hold
        placeholders, which ``--apply`` fills (see :mod:`rlax_launchers.run_credentials`).
        """
        credentials = self.config.credentials
        if not credentials.insecure and credentials.secrets is None:
            source = credentials.folder or f"{run_dir / GENERATED_SUBDIR} (generated then)"
            print(
                "the Secrets of the run's transport credentials hold placeholders here; "
                f"--apply fills them from {source}",
                file=sys.stderr,
            )
        return [
            RenderedArtifact(
                kind="manifest",
                name=f"{m['kind']}/{m['metadata']['name']}",
                content=manifest_yaml(m),
            )
            for m in render_manifests(self.config, run_config).items
        ]

    def launch(self, run_config: RunConfigBase, run_dir: Path) -> None:
        """Creates or replaces every object through the Kubernetes API.

        Before anything is created, the cluster's JobSet must know the failure-policy
        actions the run's JobSet uses (see :mod:`rlax_launchers.gke.jobset_controller`).
        """
        manifests = render_manifests(
            self.config, run_config, self._credentials(run_config, run_dir)
        )
        cluster = self._cluster()
        (jobset,) = [m for m in manifests.items if m["kind"] == "JobSet"]
        check_jobset_controller(cluster, failure_policy_actions(jobset))
        for manifest in manifests.items:
            outcome = cluster.apply(manifest)
            print(f"{manifest['kind']}/{manifest['metadata']['name']} {outcome}", file=sys.stderr)
        print(
            f"run {manifests.objects.prefix} applied to {cluster.host} (namespace "
            f"{self.config.namespace}); `rlax launch CONFIG --status` shows its pods",
            file=sys.stderr,
        )
        print(
            f"its pods run as ServiceAccount {self.config.namespace}/"
            f"{service_account_name(self.config)}, which needs access to the run's bucket "
            "(Workload Identity: see the gke section of rlax-launchers' README)",
            file=sys.stderr,
        )

    def _credentials(self, run_config: RunConfigBase, run_dir: Path) -> CredentialFiles | None:
        """The run's credentials for the Secrets the launcher renders: read from
        ``credentials.folder``, or generated under ``run_dir`` on the first ``--apply``
        and reused after (None: the config names Secrets, or the run has none)."""
        section = self.config.credentials
        if section.insecure or section.secrets is not None:
            return None
        prefix = resource_prefix(run_config, self.config.name)
        folder = run_credentials_folder(
            section, run_dir, transport_server_hosts(self.config, prefix)
        )
        print(f"the run's transport credentials: {folder}", file=sys.stderr)
        return read_credential_files(folder)

    def status(self, run_dir: Path) -> list[ProcessStatus]:
        """One entry per pod of the run: its role, phase and container restarts."""
        objects = run_objects(self.config, self._run_config())
        statuses = []
        for pod in self._cluster().pods(self.config.namespace, objects.selector()):
            labels = pod.metadata.labels or {}
            role = labels.get("app.kubernetes.io/component", "worker")
            state = _PHASES.get(pod.status.phase or "Pending", "starting")
            if pod.metadata.deletion_timestamp is not None:
                state = "stopped"
            restarts = sum(c.restart_count for c in pod.status.container_statuses or [])
            statuses.append(
                ProcessStatus(
                    role=role if role in get_args(ProcessRole) else "worker",
                    name=pod.metadata.name,
                    state=state,
                    restarts=restarts,
                )
            )
        return statuses

    def stop(self, run_dir: Path) -> None:
        """Deletes the JobSet (its pods get SIGTERM: the trainer checkpoints), then the rest.

        The verifiers' ScaledObject goes before their Deployment, so KEDA does not scale
        it while it is deleted. PriorityClasses and the ServiceAccount stay: other runs
        may use them (the ServiceAccount's IAM binding names it), and so do Secrets of
        credentials the config names (``credentials.secrets``: the user's). Objects that
        are not there (a run without verifiers, a cluster without KEDA) are skipped.
        """
        objects = run_objects(self.config, self._run_config())
        transport = transport_service_name(objects.prefix)
        verifiers = verifier_deployment_name(objects.prefix)
        namespace = self.config.namespace
        cluster = self._cluster()
        for kind, name in [
            ("JobSet", objects.prefix),
            ("ScaledObject", verifiers),
            ("Deployment", verifiers),
            ("StatefulSet", transport),
            ("Deployment", transport),
            ("Service", transport),
            ("NetworkPolicy", transport),
            ("PersistentVolumeClaim", f"{transport}-state"),
            ("ConfigMap", objects.config_map),
            ("Secret", f"{objects.prefix}-credentials"),
            *(
                ("Secret", name)
                for name in (objects.role_secrets or {}).values()
                if self.config.credentials.secrets is None
            ),
        ]:
            if cluster.delete(kind, name, namespace):
                print(f"{kind}/{name} deleted", file=sys.stderr)

    def _cluster(self) -> Cluster:
        return Cluster(self.config.kubeconfig, self.config.kube_context)

    def _run_config(self) -> Any:
        if self.run_config is None:
            raise RlaxError(
                "the gke launcher was built without a run config, so it cannot name the "
                "run's objects: build it with BuildContext(run_config=...)"
            )
        return self.run_config


def make_gke_launcher(config: GkeLauncherConfig, context: BuildContext) -> GkeLauncher:
    """Builds the launcher for the run in ``context.run_config``."""
    return GkeLauncher(config, context.run_config)
