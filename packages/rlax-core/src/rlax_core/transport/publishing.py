"""What every parameter store does before it publishes: validate, own, checksum, describe.

A store's :meth:`~rlax_core.contracts.ParameterStore.publish` (in-process, NATS, gRPC,
or a third party's) starts with the same steps, so they are written once here: the
version number and the tensor names are checked, every value becomes a C-contiguous
host array of a supported dtype, each tensor is hashed, and the
:class:`~rlax_core.types.policy.PolicyVersion` manifest (with its whole-version
checksum) is built. What follows is the store's own: how the bytes travel and how the
version becomes visible atomically.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlax_core.tensors import (
    CHECKSUM_ALGORITHM,
    SIGNED_CHECKSUM_ALGORITHM,
    aligned_copy,
    as_host_array,
    manifest_checksum,
    tensor_checksums,
)
from rlax_core.types.policy import PolicyVersion, TensorInfo

if TYPE_CHECKING:
    from rlax_core.transport.signing import VersionSigner


@dataclass(frozen=True)
class PreparedVersion:
    """A version ready to publish: its manifest and its host arrays, in the same order.

    Attributes:
        info: the manifest (names, dtypes, shapes, checksums, metadata, creation time).
        arrays: the tensors as C-contiguous host arrays, by name.
    """

    info: PolicyVersion
    arrays: dict[str, np.ndarray]


def check_version_number(version: object) -> int:
    """``version`` if it is a valid policy version number.

    Raises:
        ValueError: it is not a non-negative int.
    """
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"version must be a non-negative int, got {version!r}")
    return version


def prepare_version(
    version: int,
    params: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    *,
    own: bool = False,
    checksums: Mapping[str, str] | None = None,
    signer: VersionSigner | None = None,
) -> PreparedVersion:
    """Checks a publish call's arguments and builds the version's manifest.

    Args:
        version: the policy version number (non-negative; the store checks it is new).
        params: parameter name → NumPy or JAX array.
        metadata: JSON-serialisable extras stored with the version.
        own: copy every array the caller could still change (a store that keeps the
            arrays, rather than sending their bytes, must not see later writes). Two
            kinds are kept as they are: an array that a device-to-host transfer just
            produced (already private), and a JAX array's own buffer on the CPU. JAX
            arrays are immutable, and JAX does not donate a buffer a NumPy view holds
            (a jitted update that asks to gets new buffers instead), so the version is
            the published arrays themselves: in one process the trainer, the store and
            an inference worker then share one copy of the policy.
        checksums: the tensors' checksums when the caller computed them from these very
            bytes (e.g. while receiving them, with the algorithm ``signer`` implies);
            None hashes them here.
        signer: signs the manifest (the run signs its weights): the tensors are then
            hashed with :data:`~rlax_core.tensors.SIGNED_CHECKSUM_ALGORITHM`.

    Raises:
        ValueError: a bad version number, no tensors, or ``checksums`` that do not name
            exactly the tensors.
        TypeError: a name that is not a non-empty string, or a value that is not an
            array of a supported dtype.
    """
    check_version_number(version)
    if not params:
        raise ValueError("a policy version needs at least one tensor; params is empty")
    arrays: dict[str, np.ndarray] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"parameter names must be non-empty strings, got {name!r}")
        host = as_host_array(name, value)
        if own and not _private(value, host):
            host = aligned_copy(host)
        arrays[name] = host
    if checksums is not None and set(checksums) != set(arrays):
        raise ValueError("checksums must name exactly the tensors")
    algorithm = CHECKSUM_ALGORITHM if signer is None else SIGNED_CHECKSUM_ALGORITHM
    digests = dict(checksums) if checksums is not None else tensor_checksums(arrays, algorithm)
    tensors = tuple(
        TensorInfo(name=n, dtype=a.dtype.name, shape=a.shape, nbytes=a.nbytes, checksum=digests[n])
        for n, a in arrays.items()
    )
    info = PolicyVersion(
        version=version,
        tensors=tensors,
        metadata=dict(metadata or {}),
        created_at=time.time(),
        checksum_algorithm=algorithm,
        checksum=manifest_checksum(
            [(t.name, t.dtype, t.shape, t.checksum) for t in tensors], algorithm
        ),
    )
    if signer is not None:
        info = signer.sign(info)
    return PreparedVersion(info, arrays)


def _private(value: Any, host: np.ndarray) -> bool:
    """Whether no one can write to ``host`` (``value`` as a host array) after publishing."""
    if host.flags.owndata and host is not value:
        return True  # a fresh device-to-host copy
    jax = sys.modules.get("jax")  # no JAX loaded: the value is not a JAX array
    return jax is not None and isinstance(value, jax.Array) and host.base is not None
