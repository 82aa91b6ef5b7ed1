"""The manifest of a published policy version."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rlax_core.tensors import CHECKSUM_ALGORITHM, manifest_checksum
from rlax_core.types.record import Record


class TensorInfo(Record):
    """One named array of a policy version, without its bytes."""

    name: str = Field(description="Flat parameter name, e.g. 'layers.0.attn.q_proj.kernel'.")
    dtype: str = Field(description="Transport dtype name, e.g. 'bfloat16' or 'float32'.")
    shape: tuple[int, ...] = Field(description="Array shape.")
    nbytes: int = Field(ge=0, description="Size of the array's bytes.")
    checksum: str = Field(description="Checksum of the array's bytes (see checksum_algorithm).")


class PolicyVersion(Record):
    """What readers learn about a version before (and while) they fetch its bytes.

    ``checksum`` covers every tensor's name, dtype, shape and checksum, so a reader that
    verifies the manifest and then each tensor it reads has verified the whole version.
    A signed version (``signature``; see :mod:`rlax_core.transport.signing`) hashes its
    tensors with a cryptographic hash, and its signature covers every field but itself.
    """

    version: int = Field(ge=0, description="Monotonic policy version; never reused.")
    tensors: tuple[TensorInfo, ...] = Field(description="Every array of the version.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="JSON metadata from the publisher (step, run id, ...)."
    )
    created_at: float = Field(description="Publish time, seconds since the epoch.")
    checksum_algorithm: str = Field(default=CHECKSUM_ALGORITHM, description="Hash used.")
    checksum: str = Field(description="Checksum of the manifest (see class docstring).")
    signature: str | None = Field(
        default=None,
        description="The publisher's Ed25519 signature of the manifest (base64), or null.",
    )

    @property
    def nbytes(self) -> int:
        """Total size of all tensors' bytes."""
        return sum(t.nbytes for t in self.tensors)

    @property
    def names(self) -> list[str]:
        """Tensor names in publish order."""
        return [t.name for t in self.tensors]

    def tensor(self, name: str) -> TensorInfo:
        """The info of one tensor; raises ``KeyError`` naming the known ones if absent."""
        for info in self.tensors:
            if info.name == name:
                return info
        raise KeyError(f"version {self.version} has no tensor {name!r}")

    def expected_checksum(self) -> str:
        """Recomputes the manifest checksum from the tensor entries."""
        entries = [(t.name, t.dtype, t.shape, t.checksum) for t in self.tensors]
        return manifest_checksum(entries, self.checksum_algorithm)
