"""The parameter server's versions as files, mapped into memory to serve them.

Each retained version is a folder ``v<version>/`` holding one raw file per tensor and
``manifest.json``, written last: a folder without it is an interrupted upload. Uploads
go to ``.upload-<random>/`` and are renamed into place when complete, so a restarted
server finds exactly the versions that were committed. Tensors are served from
read-only memory maps of those files: the page cache holds one copy for all readers,
and memory stays bounded by what the kernel can cache.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path

import numpy as np

from rlax_core.errors import ChecksumMismatchError, ManifestError
from rlax_core.kit.transport import (
    IncomingChecksum,
    ManifestLimits,
    dtype_from_name,
    parse_manifest,
)
from rlax_core.types.policy import PolicyVersion


class Upload:
    """One version being received: a file per tensor, written at given offsets.

    Args:
        root: the namespace's folder.
        manifest: what the publisher announced, already checked (``check_manifest``).
    """

    def __init__(self, root: Path, manifest: PolicyVersion) -> None:
        self.manifest = manifest
        self.folder = root / f".upload-{secrets.token_hex(6)}"
        self.folder.mkdir(parents=True)
        self.received = [0] * len(manifest.tensors)
        # One file open at a time: chunks come tensor by tensor, and a version of many
        # thousand tensors must not need as many descriptors.
        self._open: tuple[int, int] | None = None  # (tensor, fd)
        # Tensors arriving in order are hashed as they come (while the bytes are hot);
        # one that arrives out of order is hashed from its file at the end.
        self._checksums = [IncomingChecksum(manifest.checksum_algorithm) for _ in manifest.tensors]
        for index, tensor in enumerate(manifest.tensors):
            with (self.folder / f"{index}.bin").open("wb") as data:
                data.truncate(tensor.nbytes)  # sparse until written

    def write(self, tensor: int, offset: int, data: memoryview) -> None:
        """Writes one chunk.

        Raises:
            ValueError: the chunk does not fit in its tensor.
        """
        if not 0 <= tensor < len(self.received):
            raise ValueError(f"chunk for tensor #{tensor}; the version has {len(self.received)}")
        info = self.manifest.tensors[tensor]
        if offset + len(data) > info.nbytes:
            raise ValueError(
                f"chunk at {offset}+{len(data)} overflows tensor {info.name!r} "
                f"of {info.nbytes} bytes"
            )
        fd = self._descriptor(tensor)
        written = 0
        while written < len(data):  # pwrite may write less than asked
            written += os.pwrite(fd, data[written:], offset + written)
        self._checksums[tensor].add(offset, data)
        self.received[tensor] += len(data)

    def missing(self) -> list[str]:
        """Names of tensors that did not receive all their bytes."""
        return [
            t.name for t, got in zip(self.manifest.tensors, self.received, strict=True)
            if got != t.nbytes
        ]  # fmt: skip

    def verified_arrays(self) -> dict[str, np.ndarray]:
        """The received tensors, mapped from their files, each checked against the
        manifest, before anything is made visible.

        Raises:
            ChecksumMismatchError: a tensor's bytes do not match its checksum.
        """
        self._close_file()
        arrays = map_version(self.folder, self.manifest)
        for tensor, checksum in zip(self.manifest.tensors, self._checksums, strict=True):
            if checksum.hexdigest(arrays[tensor.name]) != tensor.checksum:
                raise ChecksumMismatchError(
                    f"tensor {tensor.name!r} of version {self.manifest.version} does not match "
                    "its checksum after the upload; publish again"
                )
        return arrays

    def commit(self, root: Path, manifest_json: bytes) -> Path:
        """Moves the verified upload into place, the manifest (as received) last.

        The memory maps of :meth:`verified_arrays` stay valid: a rename keeps the files.
        """
        final = root / f"v{self.manifest.version}"
        if final.exists():  # the leftover of a commit that died before its manifest
            shutil.rmtree(final)
        self.folder.rename(final)
        temporary = final / "manifest.json.tmp"
        temporary.write_bytes(manifest_json)
        temporary.rename(final / "manifest.json")
        return final

    def discard(self) -> None:
        """Deletes everything received."""
        self._close_file()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _descriptor(self, tensor: int) -> int:
        if self._open is None or self._open[0] != tensor:
            self._close_file()
            self._open = (tensor, os.open(self.folder / f"{tensor}.bin", os.O_RDWR))
        return self._open[1]

    def _close_file(self) -> None:
        if self._open is not None:
            os.close(self._open[1])
            self._open = None


def map_version(folder: Path, manifest: PolicyVersion) -> dict[str, np.ndarray]:
    """The tensors of a version folder, as read-only memory maps (the manifest checked)."""
    arrays: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(manifest.tensors):
        dtype = np.dtype(dtype_from_name(tensor.dtype))
        if tensor.nbytes == 0:
            arrays[tensor.name] = np.empty(tensor.shape, dtype)
        else:
            arrays[tensor.name] = np.memmap(
                folder / f"{index}.bin", dtype=dtype, mode="r", shape=tensor.shape
            )
    return arrays


def damaged_tensors(folder: Path, manifest: PolicyVersion) -> list[str]:
    """Names of tensors whose file is missing or not of the size the manifest says."""
    damaged = []
    for index, tensor in enumerate(manifest.tensors):
        path = folder / f"{index}.bin"
        if not path.is_file() or path.stat().st_size != tensor.nbytes:
            damaged.append(tensor.name)
    return damaged


def committed_versions(
    root: Path, limits: ManifestLimits | None = None
) -> list[tuple[int, Path, PolicyVersion]]:
    """Committed versions under ``root``, oldest first; removes interrupted uploads.

    A folder whose manifest does not parse or check (``parse_manifest``), names another
    version, or whose files do not have the sizes it states is moved aside to
    ``.quarantine/`` with a warning: a restarted server serves the rest of the namespace
    rather than failing every call in it.
    """
    found = []
    if not root.is_dir():
        return found
    for entry in root.iterdir():
        if entry.name.startswith(".upload-"):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith("v") and (entry / "manifest.json").is_file():
            try:
                manifest = parse_manifest(
                    (entry / "manifest.json").read_bytes(), str(entry), limits
                )
            except (ManifestError, OSError) as exc:
                quarantine(entry, str(exc))
                continue
            if entry.name != f"v{manifest.version}":
                quarantine(entry, f"its manifest is of version {manifest.version}")
                continue
            damaged = damaged_tensors(entry, manifest)
            if damaged:  # e.g. a disk filled up: serving it would only fail every reader
                quarantine(entry, f"version {manifest.version} is damaged ({damaged} have the "
                           "wrong size)")  # fmt: skip
                continue
            found.append((manifest.version, entry, manifest))
        elif entry.name.startswith("v"):
            shutil.rmtree(entry, ignore_errors=True)
    return sorted(found, key=lambda item: item[0])


def quarantine(entry: Path, why: str) -> None:
    """Moves a bad file or folder into its parent's ``.quarantine/``, saying why."""
    aside = entry.parent / ".quarantine" / f"{entry.name}-{secrets.token_hex(3)}"
    aside.parent.mkdir(exist_ok=True)
    entry.rename(aside)
    print(f"rlax: {entry} is unusable ({why}); moved to {aside} and skipped", file=sys.stderr)


def remove_versions(root: Path, keep: set[int]) -> None:
    """Deletes the folders of committed versions not in ``keep``.

    Readers still holding a memory map of a deleted file keep reading it (the kernel
    frees it after the last map goes), so a fetch racing an eviction completes.
    """
    for entry in root.iterdir():
        if (
            entry.name.startswith("v")
            and entry.name[1:].isdigit()
            and int(entry.name[1:]) not in keep
        ):
            shutil.rmtree(entry, ignore_errors=True)
