"""Settings of the ``gke`` launcher (the ``launcher:`` section of a run config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_launchers.tpu_slice import TpuSliceConfig

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class GkeWorkersConfig(TpuSliceConfig):
    """The inference workers' TPU slices: one worker pod per host (``rollout.workers`` in all)."""

    spot: bool = Field(
        default=True,
        description="Schedule workers on Spot nodes (cloud.google.com/gke-spot); a reclaimed "
        "worker costs the run only its lease.",
    )


class PriorityClassConfig(BaseModel):
    """A PriorityClass the run's pods use."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_K8S_NAME, description="Name of the PriorityClass.")
    value: int = Field(
        le=1_000_000_000, description="Its priority; pods of higher value may preempt lower."
    )


class GkeTransportConfig(BaseModel):
    """The transport server's pod: NATS as a StatefulSet, gRPC as a Deployment."""

    model_config = ConfigDict(extra="forbid")

    cpu: str = Field(default="2", description="CPU request of the server pod, e.g. '2' or '500m'.")
    memory_gib: int = Field(
        default=16, ge=1, description="Memory request and limit of the server pod in GiB."
    )
    storage_gib: int = Field(
        default=50,
        ge=1,
        description="Size in GiB of the volume holding the server's retained versions and "
        "queues, so a restarted server keeps them.",
    )
    storage_class: str | None = Field(
        default=None, description="StorageClass of that volume (null: the cluster's default)."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the server pod must run on (CPU nodes)."
    )


class GkeLauncherConfig(BaseModel):
    """Runs on a GKE cluster: a JobSet of trainer and worker pods on TPU node pools."""

    model_config = ConfigDict(extra="forbid")

    image: str | None = Field(
        default=None,
        description="Container image built from the project's Dockerfile (one image, every "
        "role), e.g. us-docker.pkg.dev/PROJECT/rlax/rlax:0.1.0.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="When nodes pull the image."
    )
    namespace: str = Field(
        default="default", pattern=_K8S_NAME, description="Kubernetes namespace of the run."
    )
    name: str | None = Field(
        default=None, description="Prefix of every object's name (null: run.name in lowercase)."
    )
    run_dir: str | None = Field(
        default=None,
        description="Run directory every pod shares, e.g. gs://BUCKET/runs/NAME "
        "(null: run.run_dir).",
    )
    service_account: str | None = Field(
        default=None,
        description="Kubernetes service account of the pods (e.g. one bound to a Google "
        "service account with Workload Identity, for run_dir on GCS).",
    )
    trainer: TpuSliceConfig = Field(
        description="The trainer's TPU slice; its hosts form one jax.distributed trainer."
    )
    workers: GkeWorkersConfig = Field(
        description="The workers' TPU slices; rollout.workers must be a multiple of its hosts."
    )
    trainer_priority: PriorityClassConfig = Field(
        default_factory=lambda: PriorityClassConfig(name="rlax-trainer", value=1000),
        description="PriorityClass of the trainer and the transport server.",
    )
    worker_priority: PriorityClassConfig = Field(
        default_factory=lambda: PriorityClassConfig(name="rlax-worker", value=100),
        description="PriorityClass of the workers: lower, so higher-priority work reclaims "
        "them; they never preempt others.",
    )
    create_priority_classes: bool = Field(
        default=True,
        description="Render the two PriorityClasses (cluster-wide; off when an admin owns them).",
    )
    kueue_queue: str | None = Field(
        default=None,
        description="Kueue LocalQueue to submit the JobSet to (kueue.x-k8s.io/queue-name).",
    )
    coordinator_port: int = Field(
        default=8476,
        ge=1024,
        le=65535,
        description="Port of the jax.distributed coordinator (trainer pod 0).",
    )
    max_trainer_restarts: int = Field(
        default=20,
        ge=0,
        description="Trainer restarts (each from its last checkpoint) before the run fails.",
    )
    termination_grace_period_s: int = Field(
        default=300,
        ge=10,
        description="Seconds a pod has after SIGTERM (a trainer writes its checkpoint).",
    )
    transport: GkeTransportConfig = Field(
        default_factory=GkeTransportConfig, description="The transport server's pod."
    )
    kubeconfig: str | None = Field(
        default=None,
        description="kubeconfig file used by --apply, --status, --stop (null: $KUBECONFIG or "
        "~/.kube/config, else the in-cluster service account).",
    )
    kube_context: str | None = Field(
        default=None, description="kubeconfig context (null: its current context)."
    )

    @model_validator(mode="after")
    def _has_an_image(self) -> GkeLauncherConfig:
        if not self.image:
            raise ValueError(
                "launcher.image is required: the pods run the RLAX image built from the "
                "project's Dockerfile; build and push it (docker build -t REGISTRY/rlax:TAG . "
                "&& docker push REGISTRY/rlax:TAG) and set image: REGISTRY/rlax:TAG"
            )
        return self
