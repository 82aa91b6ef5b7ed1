"""What every parameter store does around a fetch: pick the tensors, place them, verify them.

A fetch names some tensors of a version (or all of them) and may bring destination
arrays of its own (``out``); the store fills the destinations and verifies every
tensor's checksum before it hands them back. The choice of destinations and the final
check are the same for every store, so they are written once here; how the bytes get
into the destinations is each store's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from rlax_core.errors import ChecksumMismatchError
from rlax_core.tensors import IncomingChecksum, tensor_checksum
from rlax_core.types.policy import PolicyVersion, TensorInfo


def wanted_names(info: PolicyVersion, names: Iterable[str] | None) -> list[str]:
    """The tensors a fetch asks for (all of the version's when ``names`` is None).

    Raises:
        KeyError: the version has no tensor of one of the names.
    """
    wanted = list(info.names if names is None else names)
    missing = [n for n in wanted if n not in info.names]
    if missing:
        raise KeyError(f"version {info.version} has no tensor(s) {missing}; it has {info.names}")
    return wanted


def fetch_destinations(
    info: PolicyVersion,
    names: Iterable[str] | None,
    out: Mapping[str, np.ndarray] | None,
) -> dict[str, np.ndarray]:
    """The arrays a fetch writes into: ``out``'s where given, new ones elsewhere.

    Raises:
        KeyError: as :func:`wanted_names`.
        ValueError: an ``out`` array of the wrong dtype or shape, or not writable and
            C-contiguous.
    """
    given = out or {}
    return {n: fetch_destination(info.tensor(n), given.get(n)) for n in wanted_names(info, names)}


def fetch_destination(tensor: TensorInfo, given: np.ndarray | None) -> np.ndarray:
    """``given`` if it can hold ``tensor`` (see :func:`fetch_destinations`), else a new array."""
    dtype = np.dtype(tensor.dtype)
    if given is None:
        return np.empty(tensor.shape, dtype)
    if given.dtype != dtype or tuple(given.shape) != tuple(tensor.shape):
        raise ValueError(
            f"out[{tensor.name!r}] is {given.dtype}{list(given.shape)}, but the tensor is "
            f"{dtype}{list(tensor.shape)}"
        )
    if not given.flags.c_contiguous or not given.flags.writeable:
        raise ValueError(f"out[{tensor.name!r}] must be a writable C-contiguous array")
    return given


def verify_received(
    info: PolicyVersion,
    arrays: Mapping[str, np.ndarray],
    checksums: Mapping[str, IncomingChecksum],
    source: str,
) -> None:
    """Checks every received tensor against the manifest's checksum.

    Args:
        info: the version's manifest.
        arrays: the filled destinations.
        checksums: each tensor's checksum as its bytes arrived.
        source: where the bytes came from, for the message (``"NATS at host:4222"``).

    Raises:
        ChecksumMismatchError: a tensor's bytes differ from what was published.
    """
    algorithm = info.checksum_algorithm
    for name, array in arrays.items():
        incoming = checksums[name]
        if incoming.algorithm == algorithm:
            digest = incoming.hexdigest(array)
        else:  # hashed as it arrived with another algorithm than the version's
            digest = tensor_checksum(array, algorithm)
        if digest != info.tensor(name).checksum:
            raise ChecksumMismatchError(
                f"tensor {name!r} of version {info.version} does not match its checksum; "
                f"the bytes from {source} are corrupted"
            )
