"""The TPU hosts of GKE node pools, and the CPU and memory a TPU pod requests on one.

A TPU pod holds all of its host's chips, so it is the only RLAX pod on its node; beside
it run only GKE's DaemonSets (logging, the metadata server, the TPU device plugin). A pod
without CPU and memory requests is BestEffort: the kubelet evicts it first when the node
runs short of memory (a trainer staging a checkpoint in host memory, say), however high
its PriorityClass. So trainer and worker pods request :data:`HOST_SHARE` of the host's
vCPUs and memory by default, well inside what the node can allocate, leaving the rest to
the DaemonSets and to bursts (there is no CPU limit: a pod may use idle cores).

Where the numbers come from: each host's machine type (Compute Engine's TPU machine
types, the 4-chip hosts that GKE TPU node pools use: ``ct4p-hightpu-4t``,
``ct5p-hightpu-4t``, ``ct5lp-hightpu-4t``, ``ct6e-standard-4t``), and what GKE reserves
on a node for the kubelet and the system (GKE's node-allocatable rules, in
:meth:`TpuHost.allocatable_cpu` and :meth:`TpuHost.allocatable_memory_gib`). A request
above what the node can allocate would leave the pod Pending forever, so it is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlax_core.errors import ConfigError
from rlax_launchers.tpu_slice import TpuSliceShape

# The share of a TPU host's vCPUs and memory a trainer or worker pod requests by default.
HOST_SHARE = 0.75


@dataclass(frozen=True)
class TpuHost:
    """One TPU host VM of a GKE node pool.

    Attributes:
        machine_type: the Compute Engine machine type of the node.
        vcpus: its vCPUs.
        memory_gib: its memory in GiB.
    """

    machine_type: str
    vcpus: int
    memory_gib: int

    def allocatable_cpu(self) -> float:
        """vCPUs GKE lets pods request: capacity less 6% of the first core, 1% of the
        second, 0.5% of the next two and 0.25% of every core above four."""
        tiers = [(1, 0.06), (1, 0.01), (2, 0.005), (math.inf, 0.0025)]
        return self.vcpus - _reserved(self.vcpus, tiers)

    def allocatable_memory_gib(self) -> float:
        """GiB GKE lets pods request: capacity less 25% of the first 4 GiB, 20% of the
        next 4, 10% of the next 8, 6% of the next 112 and 2% above 128 GiB, and the
        kubelet's 100 MiB eviction threshold."""
        tiers = [(4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (math.inf, 0.02)]
        return self.memory_gib - _reserved(self.memory_gib, tiers) - 100 / 1024


# TPU generation → its 4-chip host.
TPU_HOSTS: dict[str, TpuHost] = {
    "v4": TpuHost("ct4p-hightpu-4t", vcpus=240, memory_gib=407),
    "v5p": TpuHost("ct5p-hightpu-4t", vcpus=208, memory_gib=448),
    "v5e": TpuHost("ct5lp-hightpu-4t", vcpus=112, memory_gib=192),
    "v6e": TpuHost("ct6e-standard-4t", vcpus=180, memory_gib=720),
}


def tpu_pod_resources(
    shape: TpuSliceShape,
    *,
    cpu: str | None,
    memory_gib: int | None,
    memory_limit_gib: int | None,
    field: str,
) -> dict[str, Any]:
    """The ``resources`` of a container that holds one host's TPU chips.

    Args:
        shape: the slice the pod is one host of.
        cpu: the CPU request (None: :data:`HOST_SHARE` of the host's vCPUs).
        memory_gib: the memory request (None: :data:`HOST_SHARE` of its memory).
        memory_limit_gib: the memory limit (None: none).
        field: the config section, for errors (e.g. ``launcher.trainer``).

    Raises:
        ConfigError: a request the host cannot allocate, or a default asked of a TPU
            generation whose host is not known here.
    """
    host = TPU_HOSTS.get(shape.generation.name)
    if host is None and (cpu is None or memory_gib is None):
        raise ConfigError(
            f"{field}: the {shape.generation.name} host's size is not known to the gke "
            "launcher, so it cannot pick the pods' requests: set cpu and memory_gib"
        )
    if host is not None:
        cpu = cpu if cpu is not None else str(math.floor(host.vcpus * HOST_SHARE))
        memory_gib = memory_gib or math.floor(host.memory_gib * HOST_SHARE)
        _check_fits(host, shape, _cores(cpu), memory_gib, field)
    chips = str(shape.chips_per_host)
    requests = {"cpu": cpu, "memory": f"{memory_gib}Gi", "google.com/tpu": chips}
    limits = {"google.com/tpu": chips}
    if memory_limit_gib is not None:
        limits["memory"] = f"{memory_limit_gib}Gi"
    return {"requests": requests, "limits": limits}


def _check_fits(
    host: TpuHost, shape: TpuSliceShape, cores: float, memory_gib: int, field: str
) -> None:
    where = f"a {shape.generation.name} host ({host.machine_type})"
    allocatable_cpu = host.allocatable_cpu()
    if cores > allocatable_cpu:
        raise ConfigError(
            f"{field}.cpu asks for {cores:g} cores, but {where} has {host.vcpus} vCPUs, about "
            f"{allocatable_cpu:.1f} of them allocatable to pods: the pod would never be "
            f"scheduled; request less, leaving room for GKE's DaemonSets (null: "
            f"{math.floor(host.vcpus * HOST_SHARE)}, three quarters of the host)"
        )
    allocatable_memory = host.allocatable_memory_gib()
    if memory_gib > allocatable_memory:
        raise ConfigError(
            f"{field}.memory_gib is {memory_gib}, but {where} has {host.memory_gib} GiB, about "
            f"{allocatable_memory:.0f} GiB of it allocatable to pods: the pod would never be "
            f"scheduled; request less, leaving room for GKE's DaemonSets (null: "
            f"{math.floor(host.memory_gib * HOST_SHARE)}, three quarters of the host)"
        )


def _cores(quantity: str) -> float:
    """Cores of a CPU quantity: ``'4'``, ``'2.5'`` or ``'500m'``."""
    if quantity.endswith("m"):
        return int(quantity[:-1]) / 1000
    return float(quantity)


def _reserved(capacity: float, tiers: list[tuple[float, float]]) -> float:
    """What a tiered reservation takes of ``capacity``: each tier's rate of its slice."""
    reserved, start = 0.0, 0.0
    for size, rate in tiers:
        reserved += rate * max(0.0, min(capacity, start + size) - start)
        start += size
    return reserved
