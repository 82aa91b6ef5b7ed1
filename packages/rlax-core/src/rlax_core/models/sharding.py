"""Device meshes and where each parameter lives on them.

The mesh has three axes: ``data`` (batch only), ``fsdp`` (batch, and parameters split
along their model dimension) and ``tensor`` (heads, MLP width and vocabulary split). The
same code runs on one device (a 1×1×1 mesh) and on many; XLA inserts the collectives.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXES = ("data", "fsdp", "tensor")
# Activations: the batch is split over both data-parallel axes.
BATCH = ("data", "fsdp")


@dataclass(frozen=True)
class MeshShape:
    """How many devices each mesh axis spans."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1

    @property
    def size(self) -> int:
        """Devices the mesh needs."""
        return self.data * self.fsdp * self.tensor

    def make(self, devices: list | None = None) -> Mesh:
        """A mesh over the first ``size`` devices (``jax.make_mesh`` fails on CPU hosts).

        Raises:
            ValueError: fewer devices than the mesh needs.
        """
        devices = list(jax.devices() if devices is None else devices)
        if len(devices) < self.size:
            raise ValueError(
                f"mesh data={self.data} × fsdp={self.fsdp} × tensor={self.tensor} needs "
                f"{self.size} devices, but this machine has {len(devices)}"
            )
        grid = np.array(devices[: self.size]).reshape(self.data, self.fsdp, self.tensor)
        return Mesh(grid, AXES)


def _rule(name: str, ndim: int) -> tuple:
    """The logical placement of a parameter from its (Hugging Face) name."""
    if ndim < 2:  # norms and biases: biases follow their projection's output split
        return ("tensor",) if name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")) else ()
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return ("fsdp", "tensor")  # (hidden, heads·dim | intermediate)
    return ("tensor", "fsdp")  # (heads·dim | intermediate | vocab, hidden)


def param_spec(mesh: Mesh, name: str, shape: tuple[int, ...]) -> PartitionSpec:
    """The PartitionSpec of a parameter; an axis that does not divide its dim is dropped."""
    spec = []
    for dim, axis in zip(shape, _rule(name, len(shape)), strict=False):
        spec.append(axis if mesh.shape[axis] > 1 and dim % mesh.shape[axis] == 0 else None)
    return PartitionSpec(*spec)


def param_sharding(mesh: Mesh, name: str, shape: tuple[int, ...]) -> NamedSharding:
    """Where a parameter of this name and shape lives on ``mesh``."""
    return NamedSharding(mesh, param_spec(mesh, name, shape))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Sharding of a (batch, ...) array: batch over data and fsdp, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH, *([None] * (ndim - 1))))


def batch_divisor(mesh: Mesh) -> int:
    """Batch sizes must be multiples of this to split over the data-parallel axes."""
    return mesh.shape["data"] * mesh.shape["fsdp"]
