"""The ``gcloud`` command lines of the ``tpu-vm`` launcher, as argv lists.

Flags follow ``gcloud compute tpus tpu-vm create`` and ``gcloud compute tpus
queued-resources create`` (a queued resource names its node with ``--node-id`` and its
software with ``--runtime-version`` where a direct create uses ``--version``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rlax_launchers.tpu_slice import TpuSliceShape
from rlax_launchers.tpu_vm.config import TpuVmLauncherConfig
from rlax_launchers.tpu_vm.startup import WORKER_SLICE_METADATA_KEY

_TPUS = ["gcloud", "compute", "tpus"]


@dataclass(frozen=True)
class SliceNode:
    """One slice of the run and how it is created.

    Attributes:
        role: ``trainer`` or ``worker``.
        index: the worker slice's index (None for the trainer).
        node: the TPU VM node's name.
        queued_resource: the queued resource's name, when slices are queued.
        shape: accelerator type, topology and hosts.
        spot: created as Spot VMs.
        script: the start-up script file ``gcloud`` reads.
    """

    role: Literal["trainer", "worker"]
    index: int | None
    node: str
    queued_resource: str | None
    shape: TpuSliceShape
    spot: bool
    script: Path


def create_command(node: SliceNode, config: TpuVmLauncherConfig, prefix: str) -> list[str]:
    """Creates the slice (directly, or as a queued resource) with its start-up script."""
    runtime_version = config.runtime_version or node.shape.generation.runtime_version
    if node.queued_resource is not None:
        command = [*_TPUS, "queued-resources", "create", node.queued_resource]
        command += [f"--node-id={node.node}", *_where(config)]
        command += [*node.shape.gcloud_shape_flags(), f"--runtime-version={runtime_version}"]
    else:
        command = [*_TPUS, "tpu-vm", "create", node.node, *_where(config)]
        command += [*node.shape.gcloud_shape_flags(), f"--version={runtime_version}"]
    if node.spot:
        command.append("--spot")
    command.append(f"--labels=rlax-run={prefix},rlax-role={node.role}")
    command.append(f"--metadata-from-file=startup-script={node.script}")
    if node.index is not None:
        command.append(f"--metadata={WORKER_SLICE_METADATA_KEY}={node.index}")
    if config.network is not None:
        command.append(f"--network={config.network}")
    if config.subnetwork is not None:
        command.append(f"--subnetwork={config.subnetwork}")
    if config.service_account is not None:
        command.append(f"--service-account={config.service_account}")
    if config.scopes:
        command.append(f"--scopes={','.join(config.scopes)}")
    return command


def graceful_stop_command(node: SliceNode, config: TpuVmLauncherConfig) -> list[str]:
    """Stops the trainer on every host (SIGTERM: it writes its checkpoint), then the server."""
    stop = "sudo systemctl stop rlax-trainer.service; sudo systemctl stop rlax-transport.service"
    return [
        *_TPUS,
        "tpu-vm",
        "ssh",
        node.node,
        *_where(config),
        "--worker=all",
        f"--command={stop}",
    ]


def delete_command(node: SliceNode, config: TpuVmLauncherConfig) -> list[str]:
    """Deletes the slice (a queued resource with ``--force``, which deletes its node too)."""
    if node.queued_resource is not None:
        return [
            *_TPUS,
            "queued-resources",
            "delete",
            node.queued_resource,
            *_where(config),
            "--force",
            "--quiet",
        ]
    return [*_TPUS, "tpu-vm", "delete", node.node, *_where(config), "--quiet"]


def list_nodes_command(config: TpuVmLauncherConfig, prefix: str) -> list[str]:
    """Lists the run's TPU VMs (by their ``rlax-run`` label) as JSON."""
    return [
        *_TPUS,
        "tpu-vm",
        "list",
        *_where(config),
        f"--filter=labels.rlax-run={prefix}",
        "--format=json",
    ]


def list_queued_resources_command(config: TpuVmLauncherConfig) -> list[str]:
    """Lists the zone's queued resources as JSON."""
    return [*_TPUS, "queued-resources", "list", *_where(config), "--format=json"]


def _where(config: TpuVmLauncherConfig) -> list[str]:
    return [f"--project={config.project}", f"--zone={config.zone}"]
