"""The verifier machines of a ``tpu-vm`` run: Compute Engine instances on CPU.

With ``verifier.placement: stage`` the run's verifiers judge on CPU (no accelerator, no
model), so they run on plain Compute Engine machines (``verifiers.machine_type``), not on
TPU hosts: ``NAME-verifier-I``, one verifier each, labelled ``rlax-run=NAME`` and
``rlax-role=verifier``. Each boots with the verifier start-up script and finds its
verifier id in its ``rlax-verifier-id`` metadata. A Spot verifier that is preempted
stops (``--instance-termination-action=STOP``, so ``--status`` shows it as failed
instead of losing sight of it); ``--apply`` deletes and creates it again, as it does a
preempted worker slice. Flags follow ``gcloud compute instances create``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlax_core.config.run_config import RunConfigBase
from rlax_launchers.role_commands import verifier_count
from rlax_launchers.tpu_vm.config import TpuVmLauncherConfig
from rlax_launchers.tpu_vm.startup import VERIFIER_ID_METADATA_KEY

_INSTANCES = ["gcloud", "compute", "instances"]

# Compute Engine instance statuses → ProcessStatus.state. A stopped instance (preempted,
# or stopped by hand) is TERMINATED.
INSTANCE_STATES = {
    "PROVISIONING": "starting",
    "STAGING": "starting",
    "RUNNING": "running",
    "REPAIRING": "restarting",
    "STOPPING": "stopped",
    "SUSPENDING": "stopped",
    "SUSPENDED": "stopped",
    "TERMINATED": "failed",
}


@dataclass(frozen=True)
class VerifierInstance:
    """One verifier machine.

    Attributes:
        name: the instance's name, ``NAME-verifier-I``.
        verifier_id: the verifier's ``--verifier-id`` (``vI``, as the local launcher's).
        zone: its zone.
        script: the start-up script file ``gcloud`` reads.
    """

    name: str
    verifier_id: str
    zone: str
    script: Path


def staged(run_config: RunConfigBase) -> bool:
    """The run judges in a stage, so it may have verifier machines (now or from before)."""
    return run_config.verifier is not None and run_config.verifier.placement == "stage"


def verifier_instances(
    config: TpuVmLauncherConfig, run_config: RunConfigBase, prefix: str, scripts: Path
) -> list[VerifierInstance]:
    """The run's verifier machines ([] when it judges inline).

    Raises:
        ConfigError: verifiers are asked for, but the run judges inline.
    """
    zone = config.verifiers.zone or config.zone
    return [
        VerifierInstance(f"{prefix}-verifier-{i}", f"v{i}", zone, scripts / "verifier-startup.sh")
        for i in range(verifier_count(run_config, config.verifiers.count))
    ]


def create_instance_command(
    instance: VerifierInstance, config: TpuVmLauncherConfig, prefix: str
) -> list[str]:
    """Creates the verifier machine with its start-up script."""
    section = config.verifiers
    command = [*_INSTANCES, "create", instance.name, *_where(config, instance.zone)]
    command += [
        f"--machine-type={section.machine_type}",
        f"--image-family={section.image_family}",
        f"--image-project={section.image_project}",
        f"--boot-disk-size={section.boot_disk_gib}GB",
    ]
    if section.spot:
        command += ["--provisioning-model=SPOT", "--instance-termination-action=STOP"]
    command.append(f"--labels=rlax-run={prefix},rlax-role=verifier")
    command.append(f"--metadata-from-file=startup-script={instance.script}")
    command.append(f"--metadata={VERIFIER_ID_METADATA_KEY}={instance.verifier_id}")
    if config.network is not None:
        command.append(f"--network={config.network}")
    if config.subnetwork is not None:
        command.append(f"--subnet={config.subnetwork}")
    if config.service_account is not None:
        command.append(f"--service-account={config.service_account}")
    if config.scopes:
        command.append(f"--scopes={','.join(config.scopes)}")
    return command


def delete_instance_command(name: str, zone: str, config: TpuVmLauncherConfig) -> list[str]:
    """Deletes a verifier machine (its systemd stops the verifier; its leases come back)."""
    return [*_INSTANCES, "delete", name, *_where(config, zone), "--quiet"]


def list_instances_command(config: TpuVmLauncherConfig, prefix: str) -> list[str]:
    """Lists the run's verifier machines in every zone (by their labels) as JSON.

    Every zone: a run whose ``verifiers.zone`` changed still finds its machines.
    """
    return [
        *_INSTANCES,
        "list",
        f"--project={config.project}",
        f"--filter=labels.rlax-run={prefix} AND labels.rlax-role=verifier",
        "--format=json",
    ]


def _where(config: TpuVmLauncherConfig, zone: str) -> list[str]:
    return [f"--project={config.project}", f"--zone={zone}"]
