"""TPU slices: accelerator types, topologies, chips and hosts.

One place knows how a Cloud TPU slice is named and shaped, so the ``tpu-vm`` launcher
(``gcloud --accelerator-type``) and the ``gke`` launcher (node selectors, ``google.com/tpu``
requests, pods per slice) agree on it. Supported: TPU v4 and v5p, whose slices are 3D
tori of chips with 2 TensorCores each and 4 chips per host; the number in an accelerator
type (``v5p-16``) counts TensorCores, so ``v5p-16`` is 8 chips on 2 hosts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError


@dataclass(frozen=True)
class TpuGeneration:
    """What differs between TPU generations.

    Attributes:
        name: the accelerator-type prefix, e.g. ``v5p``.
        cores_per_chip: TensorCores per chip (the unit of the accelerator-type number).
        chips_per_host: TPU chips attached to one host VM.
        runtime_version: the TPU VM software version to boot (``--version``).
        gke_accelerator: the value of the ``cloud.google.com/gke-tpu-accelerator`` label.
        default_topologies: chips → the usual slice shape of that size.
    """

    name: str
    cores_per_chip: int
    chips_per_host: int
    runtime_version: str
    gke_accelerator: str
    default_topologies: dict[int, str]


# The usual 3D shapes by chip count (v4 and v5p share them).
_CUBE_SHAPES = {
    4: "2x2x1",
    8: "2x2x2",
    16: "2x2x4",
    32: "2x4x4",
    64: "4x4x4",
    128: "4x4x8",
    256: "4x8x8",
    512: "8x8x8",
    1024: "8x8x16",
    2048: "8x16x16",
    4096: "16x16x16",
    6144: "16x16x24",
}

GENERATIONS: dict[str, TpuGeneration] = {
    "v4": TpuGeneration("v4", 2, 4, "tpu-ubuntu2204-base", "tpu-v4-podslice", _CUBE_SHAPES),
    "v5p": TpuGeneration("v5p", 2, 4, "v2-alpha-tpuv5", "tpu-v5p-slice", _CUBE_SHAPES),
}

_ACCELERATOR_TYPE = re.compile(r"^(?P<generation>v[0-9][a-z]*)-(?P<cores>[1-9][0-9]*)$")
_TOPOLOGY = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*$")


class TpuSliceConfig(BaseModel):
    """One TPU slice: its accelerator type and, optionally, its shape."""

    model_config = ConfigDict(extra="forbid")

    accelerator_type: str = Field(
        description="Cloud TPU accelerator type, e.g. 'v5p-8' (4 chips, 1 host) or 'v5p-16' "
        "(8 chips, 2 hosts); the number counts TensorCores (2 per v4/v5p chip)."
    )
    topology: str | None = Field(
        default=None,
        description="Chip topology AxBxC whose product is the chip count, e.g. '2x2x2' for "
        "v5p-16 (null: the usual shape of that size).",
    )

    @model_validator(mode="after")
    def _shape_is_known(self) -> TpuSliceConfig:
        self.shape()  # raises ValueError, which pydantic reports at this field
        return self

    def shape(self) -> TpuSliceShape:
        """The slice's generation, chips, hosts and topology.

        Raises:
            ValueError: an unknown generation, a malformed accelerator type or topology,
                a topology whose chips differ from the accelerator type's, or a slice
                that does not fill whole hosts.
        """
        match = _ACCELERATOR_TYPE.match(self.accelerator_type)
        if match is None:
            raise ValueError(
                f"accelerator_type {self.accelerator_type!r} is not of the form "
                "v<generation>-<TensorCores>, e.g. 'v5p-16'"
            )
        generation = GENERATIONS.get(match["generation"])
        if generation is None:
            raise ValueError(
                f"TPU generation {match['generation']!r} is not supported by the launchers; "
                f"supported: {', '.join(GENERATIONS)}"
            )
        cores = int(match["cores"])
        if cores % generation.cores_per_chip:
            raise ValueError(
                f"{self.accelerator_type} names {cores} TensorCores, which is not a whole "
                f"number of {generation.name} chips ({generation.cores_per_chip} cores each)"
            )
        chips = cores // generation.cores_per_chip
        if chips % generation.chips_per_host:
            raise ValueError(
                f"{self.accelerator_type} has {chips} chips; RLAX places whole hosts of "
                f"{generation.chips_per_host} chips: use {generation.name}-"
                f"{generation.chips_per_host * generation.cores_per_chip} or larger multiples"
            )
        topology = self.topology or generation.default_topologies.get(chips)
        if topology is None:
            raise ValueError(
                f"{self.accelerator_type} ({chips} chips) has no usual shape; give topology "
                "AxBxC whose product is the chip count"
            )
        if not _TOPOLOGY.match(topology):
            raise ValueError(f"topology {topology!r} is not of the form AxBxC, e.g. '2x2x2'")
        topology_chips = math.prod(int(d) for d in topology.split("x"))
        if topology_chips != chips:
            usual = generation.default_topologies.get(chips)
            raise ValueError(
                f"topology {topology} has {topology_chips} chips but {self.accelerator_type} "
                f"has {chips}; give a topology whose product is {chips}"
                + (f", e.g. {usual}" if usual else "")
            )
        return TpuSliceShape(
            generation=generation,
            accelerator_type=self.accelerator_type,
            chips=chips,
            hosts=chips // generation.chips_per_host,
            topology=topology,
            explicit_topology=self.topology is not None,
        )


@dataclass(frozen=True)
class TpuSliceShape:
    """A validated slice.

    Attributes:
        generation: the TPU generation.
        accelerator_type: e.g. ``v5p-16``.
        chips: TPU chips in the slice.
        hosts: host VMs in the slice (one RLAX process each).
        topology: e.g. ``2x2x2``.
        explicit_topology: the config named the topology (``gcloud`` is then given
            ``--type`` and ``--topology`` rather than ``--accelerator-type``).
    """

    generation: TpuGeneration
    accelerator_type: str
    chips: int
    hosts: int
    topology: str
    explicit_topology: bool

    @property
    def chips_per_host(self) -> int:
        """TPU chips one host (one pod on GKE) requests."""
        return self.generation.chips_per_host

    def gcloud_shape_flags(self) -> list[str]:
        """``--accelerator-type=...``, or ``--type=... --topology=...`` for an explicit shape."""
        if self.explicit_topology:
            return [f"--type={self.generation.name}", f"--topology={self.topology}"]
        return [f"--accelerator-type={self.accelerator_type}"]


def check_trainer_mesh(run_config: RunConfigBase, trainer: TpuSliceShape) -> None:
    """Refuses a trainer mesh that does not cover the trainer slice's chips exactly.

    JAX sees one device per chip of these generations; a mesh over fewer leaves chips
    idle that the run pays for, and one over more cannot be built once the slice is
    found (after the wait for capacity).

    Raises:
        ConfigError: data × fsdp × tensor differs from the slice's chips.
    """
    mesh = run_config.trainer.mesh
    devices = mesh.data * mesh.fsdp * mesh.tensor
    if devices != trainer.chips:
        raise ConfigError(
            f"trainer.mesh is data={mesh.data} × fsdp={mesh.fsdp} × tensor={mesh.tensor} = "
            f"{devices} devices, but the trainer slice {trainer.accelerator_type} has "
            f"{trainer.chips} chips: make the axes multiply to {trainer.chips} (e.g. "
            f"mesh: {{fsdp: {trainer.chips}}}), or change launcher.trainer.accelerator_type"
        )
