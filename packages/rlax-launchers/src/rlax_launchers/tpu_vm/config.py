"""Settings of the ``tpu-vm`` launcher (the ``launcher:`` section of a run config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlax_launchers.run_credentials import RunCredentialsConfig
from rlax_launchers.tpu_slice import TpuSliceConfig


class WorkerSlicesConfig(TpuSliceConfig):
    """The inference workers' slices: every host runs one worker (``rollout.workers`` in all)."""

    spot: bool = Field(
        default=True,
        description="Create worker slices as Spot TPU VMs (cheap, preemptible; a preempted "
        "worker costs the run nothing but its lease).",
    )


class TpuVmVerifiersConfig(BaseModel):
    """The verifiers (verifier.placement: stage): CPU machines, one verifier process each."""

    model_config = ConfigDict(extra="forbid")

    count: int | None = Field(
        default=None,
        ge=0,
        description="Verifier machines, NAME-verifier-I, one verifier each (null: "
        "verifier.workers when the run judges in a stage, else none).",
    )
    machine_type: str = Field(
        default="n2-standard-8",
        description="Compute Engine machine type of a verifier: CPU only, judging runs no "
        "model (its code sandboxes want cores).",
    )
    zone: str | None = Field(
        default=None,
        description="Zone of the verifier machines (null: the launcher's zone); they reach "
        "the transport server over the TPU VMs' network.",
    )
    spot: bool = Field(
        default=True,
        description="Create verifiers as Spot VMs; a preempted verifier costs the run only "
        "its leases, and --apply recreates it.",
    )
    image_family: str = Field(
        default="ubuntu-2204-lts",
        description="Boot image family (Ubuntu 22.04, as on the TPU VMs, with gcloud).",
    )
    image_project: str = Field(
        default="ubuntu-os-cloud", description="Project of the boot image family."
    )
    boot_disk_gib: int = Field(
        default=50, ge=10, description="Boot disk of a verifier machine, in GiB."
    )


class TpuVmLauncherConfig(BaseModel):
    """Runs on Cloud TPU VMs: one trainer slice and spot worker slices, created with gcloud
    (and CPU verifier machines when the run judges in a stage)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(description="Google Cloud project of the TPU VMs.")
    zone: str = Field(description="Zone of the TPU VMs, e.g. 'us-east5-a' for v5p.")
    name: str | None = Field(
        default=None,
        description="Prefix of the TPU VM names (null: run.name in lowercase).",
    )
    run_dir: str | None = Field(
        default=None,
        description="Run directory every host shares, e.g. gs://BUCKET/runs/NAME "
        "(null: run.run_dir).",
    )
    trainer: TpuSliceConfig = Field(
        description="The trainer's slice; its hosts form one jax.distributed trainer."
    )
    workers: WorkerSlicesConfig = Field(
        description="The workers' slices; rollout.workers must be a multiple of its hosts."
    )
    queued_resources: bool = Field(
        default=False,
        description="Request slices as queued resources (created when capacity frees up) "
        "instead of creating TPU VMs directly.",
    )
    runtime_version: str | None = Field(
        default=None,
        description="TPU VM software version (null: the generation's base image, e.g. "
        "v2-alpha-tpuv5 for v5p).",
    )
    network: str | None = Field(
        default=None,
        description="VPC network of the TPU VMs and verifier machines (null: the project's "
        "default).",
    )
    subnetwork: str | None = Field(
        default=None,
        description="Subnetwork of the TPU VMs and verifier machines (null: the network's "
        "default; a subnetwork is regional, so verifiers.zone must be in its region).",
    )
    service_account: str | None = Field(
        default=None,
        description="Service account of the TPU VMs and verifier machines (null: the compute "
        "default); it needs storage access to run_dir and tpu.nodes.get to find the trainer "
        "slice.",
    )
    scopes: list[str] = Field(
        default_factory=lambda: ["cloud-platform"],
        description="OAuth scopes of the machines' service account (IAM still decides).",
    )
    pip_packages: list[str] | None = Field(
        default=None,
        description="pip requirements installed on every host from the index, instead of "
        "the RLAX wheels --apply builds from this checkout and uploads to RUN_DIR/wheels "
        "(null: those wheels, checked by sha256, and jax[tpu] at the installed JAX version).",
    )
    python_version: str = Field(
        default="3.11",
        pattern=r"^3\.[0-9]+$",
        description="Python of the hosts' virtual environment: apt installs pythonX.Y and "
        "pythonX.Y-venv from the image's archive (the TPU VM images are Ubuntu 22.04, whose "
        "own python3 is 3.10 and whose archive has 3.11), and the venv is made with "
        "/usr/bin/pythonX.Y; no interpreter is downloaded. RLAX needs 3.11 or newer.",
    )
    apt_packages: list[str] = Field(
        default_factory=lambda: ["bubblewrap", "g++"],
        description="Debian packages installed on every host (the local sandbox runs "
        "programs under bubblewrap; C++ problems need g++).",
    )
    verifiers: TpuVmVerifiersConfig = Field(
        default_factory=TpuVmVerifiersConfig,
        description="The verifier machines on CPU (verifier.placement: stage).",
    )
    credentials: RunCredentialsConfig = Field(
        default_factory=RunCredentialsConfig,
        description="The transport's per-run credentials (TLS, one per role, signed "
        "weights), written by each host's start-up script: generated by --apply unless a "
        "folder is named; a dry run shows placeholders.",
    )
    coordinator_port: int = Field(
        default=8476,
        ge=1024,
        le=65535,
        description="Port of the jax.distributed coordinator on the trainer slice's host 0.",
    )
    stop_timeout_s: int = Field(
        default=300,
        ge=10,
        description="Seconds a role has after SIGTERM (a trainer writes its checkpoint) "
        "before it is killed.",
    )

    @field_validator("python_version")
    @classmethod
    def _python_rlax_runs_on(cls, value: str) -> str:
        if int(value.split(".")[1]) < 11:
            raise ValueError(
                f"RLAX needs Python 3.11 or newer, not {value}: use '3.11' (in the TPU VM "
                "images' Ubuntu 22.04 archive) or a newer one the image's archive has"
            )
        return value
