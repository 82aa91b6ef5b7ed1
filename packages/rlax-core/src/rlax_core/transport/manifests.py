"""Manifests as they come off the wire: parsed and checked before anything trusts them.

A server receives manifests from clients and a client reads them from a server; either
side may be hostile or broken. Every store runs what it receives through
:func:`parse_manifest` (bytes or text to a :class:`PolicyVersion`) and
:func:`check_manifest` (what it claims is possible and within bounds) before it
allocates, maps or commits anything, so a bad manifest is a :class:`ManifestError` with
a message, never a ``JSONDecodeError``, a ``MemoryError`` or a half-made version.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlax_core.errors import ManifestError
from rlax_core.tensors import CHECKSUM_ALGORITHMS, SUPPORTED_DTYPES, dtype_from_name
from rlax_core.types.policy import PolicyVersion

MAX_VERSION = 2**53 - 1
"""The largest version number: every JSON reader holds it exactly, and a trainer that
published a version a second for a million years would not reach it."""


class ManifestLimits(BaseModel):
    """What a store accepts in one version (defaults fit a 70B model in fp32)."""

    model_config = ConfigDict(extra="forbid")

    max_tensors: int = Field(default=100_000, ge=1, description="Tensors in one version.")
    max_tensor_gb: float = Field(
        default=64.0, gt=0, description="Bytes of one tensor, in GB (10^9 bytes)."
    )
    max_version_gb: float = Field(
        default=512.0, gt=0, description="Bytes of one whole version, in GB (10^9 bytes)."
    )
    max_manifest_mb: float = Field(
        default=64.0, gt=0, description="Size of the manifest itself, in MB (10^6 bytes)."
    )


def parse_manifest(
    data: bytes | str, source: str, limits: ManifestLimits | None = None
) -> PolicyVersion:
    """A manifest from its JSON, checked (see :func:`check_manifest`).

    Args:
        data: the manifest's JSON.
        source: where it came from, for the message (``"the gRPC server at …"``).
        limits: the bounds; the defaults when None.

    Raises:
        ManifestError: not JSON, not a manifest, or it fails a check.
    """
    limits = limits or ManifestLimits()
    if len(data) > limits.max_manifest_mb * 1e6:
        raise ManifestError(
            f"a manifest from {source} is {len(data)} bytes, more than "
            f"{limits.max_manifest_mb} MB; refused"
        )
    try:
        info = PolicyVersion.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ManifestError(
            f"a manifest from {source} is malformed ({exc.error_count()} problem(s); "
            f"first: {where or 'the document'}: {first.get('msg')}); refused"
        ) from None
    return check_manifest(info, source, limits)


def check_manifest(
    info: PolicyVersion, source: str, limits: ManifestLimits | None = None
) -> PolicyVersion:
    """Returns ``info`` if what it claims can be a policy version within ``limits``.

    Checked: the version number (≤ :data:`MAX_VERSION`); at least one tensor and no more
    than the limit; unique non-empty names; supported dtypes; non-negative shapes whose
    element count times the item size is the stated byte count; each tensor and the
    whole version within the limits; a known checksum algorithm; the manifest checksum
    over the tensor entries.

    Raises:
        ManifestError: the first check that fails, naming the tensor.
    """
    limits = limits or ManifestLimits()
    where = f"version {info.version} from {source}"
    if info.version > MAX_VERSION:
        raise ManifestError(f"{where}: version numbers stop at {MAX_VERSION}; refused")
    if not info.tensors:
        raise ManifestError(f"{where}: has no tensors; refused")
    if len(info.tensors) > limits.max_tensors:
        raise ManifestError(
            f"{where}: {len(info.tensors)} tensors, more than {limits.max_tensors}; refused"
        )
    if info.checksum_algorithm not in CHECKSUM_ALGORITHMS:
        raise ManifestError(
            f"{where}: unknown checksum algorithm {info.checksum_algorithm!r}; refused"
        )
    names: set[str] = set()
    total = 0
    for tensor in info.tensors:
        what = f"{where}: tensor {tensor.name!r}"
        if not tensor.name or tensor.name in names:
            raise ManifestError(f"{what}: names must be non-empty and unique; refused")
        names.add(tensor.name)
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise ManifestError(
                f"{what}: dtype {tensor.dtype!r} is not one of {', '.join(SUPPORTED_DTYPES)}"
            )
        if any(d < 0 for d in tensor.shape):
            raise ManifestError(f"{what}: negative dimension in shape {list(tensor.shape)}")
        expected = math.prod(tensor.shape) * np.dtype(dtype_from_name(tensor.dtype)).itemsize
        if expected != tensor.nbytes:
            raise ManifestError(
                f"{what}: shape {list(tensor.shape)} of {tensor.dtype} is {expected} bytes, "
                f"but it claims {tensor.nbytes}; refused"
            )
        if tensor.nbytes > limits.max_tensor_gb * 1e9:
            raise ManifestError(
                f"{what}: {tensor.nbytes} bytes, more than {limits.max_tensor_gb} GB; refused"
            )
        total += tensor.nbytes
    if total > limits.max_version_gb * 1e9:
        raise ManifestError(
            f"{where}: {total} bytes in all, more than {limits.max_version_gb} GB; refused"
        )
    if info.expected_checksum() != info.checksum:
        raise ManifestError(f"{where}: its checksum does not match its tensor entries; refused")
    return info
