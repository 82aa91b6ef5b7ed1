"""Settings of the ``gke`` launcher (the ``launcher:`` section of a run config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_launchers.run_credentials import RunCredentialsConfig
from rlax_launchers.tpu_slice import TpuSliceConfig

_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A CPU quantity: whole or decimal cores, or millicores.
_CPU = r"^([0-9]+m|[0-9]+(\.[0-9]+)?)$"
# What GKE gives pods on a Spot node it reclaims (see GkeLauncherConfig's grace fields).
SPOT_GRACE_S = 15
SPOT_GRACE_MAX_S = 120


class GkeTpuPodsConfig(TpuSliceConfig):
    """A TPU slice on GKE, one pod per host, with the CPU and memory each pod requests.

    Without CPU and memory requests a pod is BestEffort, the first the kubelet evicts when
    the node runs short; with them it is Burstable (no CPU limit, so it may use idle
    cores). The defaults are :data:`~rlax_launchers.gke.tpu_hosts.HOST_SHARE` of the TPU
    host's vCPUs and memory (see :mod:`rlax_launchers.gke.tpu_hosts`).
    """

    cpu: str | None = Field(
        default=None,
        pattern=_CPU,
        description="CPU request of each pod, e.g. '150' or '500m' (null: three quarters of "
        "the TPU host's vCPUs, e.g. 156 on a v5p host).",
    )
    memory_gib: int | None = Field(
        default=None,
        ge=1,
        description="Memory request of each pod in GiB (null: three quarters of the TPU "
        "host's memory, e.g. 336 on a v5p host).",
    )
    memory_limit_gib: int | None = Field(
        default=None,
        ge=1,
        description="Memory limit of each pod in GiB (null: none, so a checkpoint's peak in "
        "host memory is not killed at the request).",
    )

    @model_validator(mode="after")
    def _limit_above_request(self) -> GkeTpuPodsConfig:
        if (
            self.memory_limit_gib is not None
            and self.memory_gib is not None
            and self.memory_limit_gib < self.memory_gib
        ):
            raise ValueError(
                f"memory_limit_gib ({self.memory_limit_gib}) is below memory_gib "
                f"({self.memory_gib})"
            )
        return self


class GkeWorkersConfig(GkeTpuPodsConfig):
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


class TolerationConfig(BaseModel):
    """A toleration of the verifier pods, for a CPU node pool with a taint of its own."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(default=None, description="Taint key (null with Exists: any taint).")
    operator: Literal["Equal", "Exists"] = Field(
        default="Equal", description="Equal: the taint's value must be value; Exists: any."
    )
    value: str | None = Field(default=None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect tolerated (null: every effect)."
    )

    @model_validator(mode="after")
    def _value_goes_with_equal(self) -> TolerationConfig:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("operator Exists matches any value: drop value, or use Equal")
        if self.operator == "Equal" and self.key is None:
            raise ValueError("operator Equal needs a key")
        return self


class VerifierAutoscaleConfig(BaseModel):
    """A KEDA ScaledObject that scales the verifiers on the to-verify queue's backlog."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Render a keda.sh/v1alpha1 ScaledObject (KEDA must be installed on the "
        "cluster; nats transport only: KEDA reads the backlog from nats-server's monitoring).",
    )
    min_replicas: int = Field(
        default=1, ge=0, description="Fewest verifier pods (0: none while nothing waits)."
    )
    max_replicas: int = Field(default=8, ge=1, description="Most verifier pods.")
    lag_threshold: int | None = Field(
        default=None,
        ge=1,
        description="Groups waiting or being judged per verifier pod that KEDA aims for "
        "(null: twice verifier.groups_per_batch, one batch judged and one waiting).",
    )
    polling_interval_s: int = Field(
        default=15, ge=1, description="Seconds between KEDA's reads of the backlog."
    )
    cooldown_period_s: int = Field(
        default=300,
        ge=0,
        description="Seconds after the last backlog before KEDA scales the verifiers to zero "
        "(min_replicas 0 only; above one replica the HPA scales down).",
    )
    monitoring_port: int = Field(
        default=8222,
        ge=1024,
        le=65535,
        description="Port of the NATS server's HTTP monitoring endpoint, which KEDA reads "
        "(opened on the transport Service when autoscaling is on).",
    )
    keda_namespace: str = Field(
        default="keda",
        pattern=_K8S_NAME,
        description="Namespace of KEDA's operator: the run's NetworkPolicy lets pods of "
        "that namespace, and no others, reach the monitoring port.",
    )

    @model_validator(mode="after")
    def _bounds_are_ordered(self) -> VerifierAutoscaleConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})"
            )
        return self


class GkeVerifiersConfig(BaseModel):
    """The verifiers (verifier.placement: stage): a Deployment of CPU pods, no TPU."""

    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(
        default=None,
        ge=0,
        description="Verifier pods (null: verifier.workers when the run judges in a stage, "
        "else none); with autoscale on, KEDA sets the count instead.",
    )
    machine_type: str | None = Field(
        default=None,
        description="Machine type of the CPU nodes to run on, e.g. n2-standard-8 (a "
        "node.kubernetes.io/instance-type node selector; null: any node that fits).",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="More node labels the verifier pods need, e.g. "
        "{cloud.google.com/gke-nodepool: cpu-pool}.",
    )
    spot: bool = Field(
        default=False,
        description="Schedule verifiers on Spot nodes; a reclaimed verifier costs the run "
        "only its leases.",
    )
    cpu: str = Field(default="4", description="CPU request of a verifier pod, e.g. '4', '500m'.")
    cpu_limit: str | None = Field(
        default=None, description="CPU limit of a verifier pod (null: none, it may burst)."
    )
    memory_gib: int = Field(default=8, ge=1, description="Memory request of a verifier pod.")
    memory_limit_gib: int | None = Field(
        default=None, ge=1, description="Memory limit in GiB (null: the request)."
    )
    tolerations: list[TolerationConfig] = Field(
        default_factory=list, description="Taints of the CPU node pool the pods tolerate."
    )
    autoscale: VerifierAutoscaleConfig = Field(
        default_factory=VerifierAutoscaleConfig,
        description="Scale the verifiers with KEDA on the to-verify queue's backlog.",
    )

    @model_validator(mode="after")
    def _one_way_to_count(self) -> GkeVerifiersConfig:
        if self.autoscale.enabled and self.replicas is not None:
            raise ValueError(
                "replicas is a fixed count, but autoscale is on and KEDA sets the count: "
                "drop replicas and set autoscale.min_replicas and autoscale.max_replicas"
            )
        if self.memory_limit_gib is not None and self.memory_limit_gib < self.memory_gib:
            raise ValueError(
                f"memory_limit_gib ({self.memory_limit_gib}) is below memory_gib "
                f"({self.memory_gib})"
            )
        return self


class GkeCredentialSecretsConfig(BaseModel):
    """Kubernetes Secrets that exist already, one per folder of ``rlax credentials DIR``."""

    model_config = ConfigDict(extra="forbid")

    trainer: str = Field(pattern=_K8S_NAME, description="The trainer's folder (DIR/trainer).")
    worker: str = Field(pattern=_K8S_NAME, description="The workers' folder (DIR/worker).")
    verifier: str = Field(pattern=_K8S_NAME, description="The verifiers' folder (DIR/verifier).")
    server: str = Field(
        pattern=_K8S_NAME,
        description="The transport server's folder (DIR/server), its credentials/ROLE files "
        "as keys credentials.ROLE.",
    )


class GkeCredentialsConfig(RunCredentialsConfig):
    """Where the run's transport credentials come from: generated per run by --apply (the
    default), a folder of ``rlax credentials``, or Secrets that exist already."""

    secrets: GkeCredentialSecretsConfig | None = Field(
        default=None,
        description="Secrets in the run's namespace that hold the credentials already (see "
        "the README for the kubectl commands); the launcher renders none and mounts these.",
    )

    @model_validator(mode="after")
    def _secrets_are_a_source(self) -> GkeCredentialsConfig:
        if self.secrets is not None and (self.insecure or self.folder is not None):
            raise ValueError(
                "secrets is where the credentials come from; drop "
                + ("insecure" if self.insecure else "folder")
            )
        return self


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
        pattern=_K8S_NAME,
        description="Kubernetes ServiceAccount every pod runs as; with Workload Identity it "
        "is the principal granted the run's bucket (see the README). Null: the namespace's "
        "'default' ServiceAccount.",
    )
    create_service_account: bool = Field(
        default=False,
        description="Render that ServiceAccount (off: it exists already). It is shared by "
        "runs and kept by --stop, like the PriorityClasses.",
    )
    gcp_service_account: str | None = Field(
        default=None,
        pattern=r"^[^@\s]+@[a-z0-9.-]+\.gserviceaccount\.com$",
        description="Google service account the ServiceAccount impersonates "
        "(iam.gke.io/gcp-service-account annotation: the older Workload Identity binding, "
        "which also needs roles/iam.workloadIdentityUser for the ServiceAccount on it); "
        "null: Workload Identity Federation grants the ServiceAccount itself.",
    )
    trainer: GkeTpuPodsConfig = Field(
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
        description="PriorityClass of the workers and verifiers: lower, so higher-priority "
        "work reclaims them; they never preempt others.",
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
        description="Seconds a pod on on-demand nodes (the trainer, the transport server) has "
        "after SIGTERM: the trainer writes its checkpoint.",
    )
    spot_node_grace_s: int = Field(
        default=SPOT_GRACE_S,
        ge=1,
        le=SPOT_GRACE_MAX_S,
        description="Seconds GKE gives the pods of a Spot node it reclaims: 15, or up to 120 "
        "on Spot node pools whose graceful termination was raised (GKE 1.35.0-gke.1171000 "
        "or later).",
    )
    spot_termination_grace_period_s: int | None = Field(
        default=None,
        ge=1,
        description="Seconds a pod on Spot nodes (workers, Spot verifiers) has after SIGTERM "
        "(null: spot_node_grace_s); at most spot_node_grace_s, since GKE stops the node then.",
    )
    transport: GkeTransportConfig = Field(
        default_factory=GkeTransportConfig, description="The transport server's pod."
    )
    verifiers: GkeVerifiersConfig = Field(
        default_factory=GkeVerifiersConfig,
        description="The verifier Deployment on CPU nodes (verifier.placement: stage).",
    )
    credentials: GkeCredentialsConfig = Field(
        default_factory=GkeCredentialsConfig,
        description="The transport's per-run credentials (TLS, one per role, signed "
        "weights): generated by --apply unless a folder or Secrets are named; a dry run "
        "renders placeholders.",
    )
    network_policy: bool = Field(
        default=True,
        description="Render a NetworkPolicy that lets only the run's pods reach the "
        "transport's ports (and KEDA its monitoring port); enforced where the cluster "
        "enforces NetworkPolicies (GKE Dataplane V2, or network policy enforcement on).",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="kubeconfig file used by --apply, --status, --stop (null: $KUBECONFIG or "
        "~/.kube/config, else the in-cluster service account).",
    )
    kube_context: str | None = Field(
        default=None, description="kubeconfig context (null: its current context)."
    )

    @property
    def spot_grace_s(self) -> int:
        """terminationGracePeriodSeconds of the pods on Spot nodes."""
        if self.spot_termination_grace_period_s is None:
            return self.spot_node_grace_s
        return self.spot_termination_grace_period_s

    @model_validator(mode="after")
    def _spot_grace_fits_gke(self) -> GkeLauncherConfig:
        wanted = self.spot_termination_grace_period_s
        if wanted is not None and wanted > self.spot_node_grace_s:
            raise ValueError(
                f"spot_termination_grace_period_s is {wanted}, but GKE gives the pods of a "
                f"reclaimed Spot node {self.spot_node_grace_s} s (spot_node_grace_s) and then "
                f"stops the node: set it to at most {self.spot_node_grace_s}; GKE gives "
                f"{SPOT_GRACE_S} s, or up to {SPOT_GRACE_MAX_S} s on Spot node pools configured "
                "for it (GKE 1.35.0-gke.1171000 or later: then raise spot_node_grace_s to that)"
            )
        return self

    @model_validator(mode="after")
    def _service_account_settings_agree(self) -> GkeLauncherConfig:
        if self.create_service_account and self.service_account is None:
            raise ValueError(
                "create_service_account needs service_account, the name of the "
                "ServiceAccount to create, e.g. service_account: rlax"
            )
        if self.gcp_service_account is not None and not self.create_service_account:
            raise ValueError(
                "gcp_service_account annotates the ServiceAccount the launcher renders: set "
                "create_service_account: true (and service_account), or annotate your own: "
                "kubectl annotate serviceaccount KSA --namespace NAMESPACE "
                f"iam.gke.io/gcp-service-account={self.gcp_service_account}"
            )
        return self

    @model_validator(mode="after")
    def _has_an_image(self) -> GkeLauncherConfig:
        if not self.image:
            raise ValueError(
                "launcher.image is required: the pods run the RLAX image built from the "
                "project's Dockerfile; build and push it (docker build -t REGISTRY/rlax:TAG . "
                "&& docker push REGISTRY/rlax:TAG) and set image: REGISTRY/rlax:TAG"
            )
        return self
