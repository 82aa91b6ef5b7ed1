"""The run's JobSet: a trainer job and the worker jobs on TPU node pools.

Preemption story, as restart policies:

* A worker pod whose node is reclaimed (a Spot node, or preemption by higher-priority
  work: the pod gets the ``DisruptionTarget`` condition) is recreated by its Job without
  counting as a failure. A worker that fails otherwise fails its Job, and the JobSet
  recreates that one Job (``RestartJobAndIgnoreMaxRestarts``); other jobs run on.
* Any trainer pod failing fails the trainer Job (``backoffLimit: 0``: the processes of a
  ``jax.distributed`` trainer restart together), and the JobSet recreates the trainer
  Job (``RestartJob``), which resumes from its last checkpoint; after
  ``max_trainer_restarts`` the run fails.
* Exit status 2 (a bad config) fails the run at once instead of restarting forever.
* The run succeeds when the trainer completes.

``RestartJob`` and ``RestartJobAndIgnoreMaxRestarts`` came with JobSet v0.12.0
(:data:`MIN_JOBSET_VERSION`); an older controller's CRD refuses them, so ``--apply``
reads the installed CRD first (:mod:`rlax_launchers.gke.jobset_controller`).

Grace periods: the trainer runs on on-demand nodes and keeps
``termination_grace_period_s`` to write its checkpoint; a worker on Spot nodes gets what
GKE gives a reclaimed Spot node's pods (15 s, up to 120 s from GKE 1.35), which is
enough because a worker has nothing to save (see :func:`jobset`).
"""

from __future__ import annotations

from typing import Any

from rlax_launchers.gke.config import GkeLauncherConfig, GkeTpuPodsConfig
from rlax_launchers.gke.pods import CONFIG_PATH, RunObjects, container, pod_spec
from rlax_launchers.gke.tpu_hosts import tpu_pod_resources
from rlax_launchers.role_commands import trainer_command, worker_command
from rlax_launchers.tpu_slice import TpuSliceShape

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
# The first JobSet release whose controller (and CRD) has the failure-policy actions
# RestartJob and RestartJobAndIgnoreMaxRestarts (kubernetes-sigs/jobset PR #1177).
MIN_JOBSET_VERSION = "v0.12.0"
# The exit status of a run config the RL loop refuses.
BAD_CONFIG_EXIT_CODE = 2
_COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
_JOB_INDEX = "metadata.labels['jobset.sigs.k8s.io/job-index']"


def jobset(
    config: GkeLauncherConfig,
    objects: RunObjects,
    *,
    run_dir: str,
    trainer: TpuSliceShape,
    workers: TpuSliceShape,
    worker_slices: int,
) -> dict[str, Any]:
    """The JobSet manifest (``jobset.x-k8s.io/v1alpha2``)."""
    name = objects.prefix
    labels = objects.labels("jobset")
    if config.kueue_queue:
        labels["kueue.x-k8s.io/queue-name"] = config.kueue_queue
    coordinator = f"{name}-trainer-0-0.{name}:{config.coordinator_port}"
    trainer_container = container(
        config,
        name="trainer",
        command=trainer_command(
            CONFIG_PATH,
            run_dir,
            num_processes=trainer.hosts,
            coordinator=coordinator,
            process_id="$(JOB_COMPLETION_INDEX)",
        ),
        env=[_field_env("JOB_COMPLETION_INDEX", _COMPLETION_INDEX)],
        ports=[{"name": "coordinator", "containerPort": config.coordinator_port}],
        resources=_tpu_resources(config.trainer, trainer, "launcher.trainer"),
        objects=objects,
    )
    # A worker's SIGTERM (its Spot node reclaimed, a preemption, --stop) sets its stop
    # event (rlax_core.cli.train_cmd): a worker still starting exits at once, holding
    # nothing; a streaming worker (rollout.engine.kind: paged) stops between engine steps
    # and nacks the leases of the groups it has not sent, so other workers take them at
    # once; a batch worker stops after its batch, and if the grace runs out first, its
    # groups come back when their leases expire (rollout.lease_s). It writes no
    # checkpoint: it is stateless, so the short grace of a Spot node is enough.
    worker_container = container(
        config,
        name="worker",
        command=worker_command(CONFIG_PATH, run_dir, "$(JOB_INDEX)-$(JOB_COMPLETION_INDEX)"),
        env=[
            _field_env("JOB_INDEX", _JOB_INDEX),
            _field_env("JOB_COMPLETION_INDEX", _COMPLETION_INDEX),
        ],
        resources=_tpu_resources(config.workers, workers, "launcher.workers"),
        objects=objects,
    )
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["trainer"]},
            "failurePolicy": {
                "maxRestarts": config.max_trainer_restarts,
                "rules": [
                    {
                        "name": "BadConfigFailsTheRun",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    },
                    {
                        "name": "WorkerRestartsAlone",
                        "action": "RestartJobAndIgnoreMaxRestarts",
                        "targetReplicatedJobs": ["worker"],
                    },
                    {
                        "name": "TrainerRestartsFromCheckpoint",
                        "action": "RestartJob",
                        "targetReplicatedJobs": ["trainer"],
                    },
                ],
            },
            "replicatedJobs": [
                _replicated_job(
                    config, objects, "trainer", 1, trainer, trainer_container, spot=False
                ),
                _replicated_job(
                    config,
                    objects,
                    "worker",
                    worker_slices,
                    workers,
                    worker_container,
                    spot=config.workers.spot,
                ),
            ],
        },
    }


def _replicated_job(
    config: GkeLauncherConfig,
    objects: RunObjects,
    role: str,
    replicas: int,
    shape: TpuSliceShape,
    role_container: dict[str, Any],
    *,
    spot: bool,
) -> dict[str, Any]:
    node_selector = {
        "cloud.google.com/gke-tpu-accelerator": shape.generation.gke_accelerator,
        "cloud.google.com/gke-tpu-topology": shape.topology,
    }
    tolerations = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    if spot:
        node_selector["cloud.google.com/gke-spot"] = "true"
        tolerations.append(
            {
                "key": "cloud.google.com/gke-spot",
                "operator": "Equal",
                "value": "true",
                "effect": "NoSchedule",
            }
        )
    priority = config.trainer_priority if role == "trainer" else config.worker_priority
    rules: list[dict[str, Any]] = [
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": role,
                "operator": "In",
                "values": [BAD_CONFIG_EXIT_CODE],
            },
        }
    ]
    if role == "worker":
        # A reclaimed node is routine for a worker: recreate the pod, count nothing.
        rules.append({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]})
    job_metadata: dict[str, Any] = {"labels": objects.labels(role)}
    if shape.hosts > 1:
        # One slice per Job: all hosts of a multi-host slice belong to one node pool.
        job_metadata["annotations"] = {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
        }
    return {
        "name": role,
        "replicas": replicas,
        "template": {
            "metadata": job_metadata,
            "spec": {
                "parallelism": shape.hosts,
                "completions": shape.hosts,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "podFailurePolicy": {"rules": rules},
                "template": {
                    "metadata": {"labels": objects.labels(role)},
                    "spec": pod_spec(
                        config,
                        objects,
                        containers=[role_container],
                        priority_class=priority.name,
                        restart_policy="Never",
                        node_selector=node_selector,
                        tolerations=tolerations,
                        spot=spot,
                        credentials=role,
                    ),
                },
            },
        },
    }


def _tpu_resources(section: GkeTpuPodsConfig, shape: TpuSliceShape, field: str) -> dict[str, Any]:
    return tpu_pod_resources(
        shape,
        cpu=section.cpu,
        memory_gib=section.memory_gib,
        memory_limit_gib=section.memory_limit_gib,
        field=field,
    )


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}
