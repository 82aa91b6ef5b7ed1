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
from pathlib import Path

import numpy as np

from rlax_core.kit.transport import IncomingChecksum
from rlax_core.types.policy import PolicyVersion


class Upload:
    """One version being received: a file per tensor, written at given offsets.

    Args:
        root: the namespace's folder.
        manifest: what the publisher announced (names, dtypes, shapes, checksums).
    """

    def __init__(self, root: Path, manifest: PolicyVersion) -> None:
        self.manifest = manifest
        self.folder = root / f".upload-{secrets.token_hex(6)}"
        self.folder.mkdir(parents=True)
        self._fds: list[int] = []
        self.received = [0] * len(manifest.tensors)
        # Tensors arriving in order are hashed as they come (while the bytes are hot);
        # one that arrives out of order is hashed from its file at the end.
        self._checksums = [IncomingChecksum() for _ in manifest.tensors]
        for index, tensor in enumerate(manifest.tensors):
            fd = os.open(self.folder / f"{index}.bin", os.O_CREAT | os.O_RDWR, 0o600)
            os.ftruncate(fd, tensor.nbytes)
            self._fds.append(fd)

    def write(self, tensor: int, offset: int, data: memoryview) -> None:
        """Writes one chunk.

        Raises:
            ValueError: the chunk does not fit in its tensor.
        """
        if not 0 <= tensor < len(self._fds):
            raise ValueError(f"chunk for tensor #{tensor}; the version has {len(self._fds)}")
        info = self.manifest.tensors[tensor]
        if offset + len(data) > info.nbytes:
            raise ValueError(
                f"chunk at {offset}+{len(data)} overflows tensor {info.name!r} "
                f"of {info.nbytes} bytes"
            )
        written = 0
        while written < len(data):  # pwrite may write less than asked
            written += os.pwrite(self._fds[tensor], data[written:], offset + written)
        self._checksums[tensor].add(offset, data)
        self.received[tensor] += len(data)

    def checksums(self, arrays: dict[str, np.ndarray]) -> dict[str, str]:
        """Each tensor's checksum: from the running hash, or from ``arrays`` if needed."""
        return {
            tensor.name: checksum.hexdigest(arrays[tensor.name])
            for tensor, checksum in zip(self.manifest.tensors, self._checksums, strict=True)
        }

    def missing(self) -> list[str]:
        """Names of tensors that did not receive all their bytes."""
        return [
            t.name for t, got in zip(self.manifest.tensors, self.received, strict=True)
            if got != t.nbytes
        ]  # fmt: skip

    def commit(self, root: Path, info: PolicyVersion) -> Path:
        """Moves the upload into place as version ``info.version``, manifest last."""
        self._close_files()
        final = root / f"v{info.version}"
        if final.exists():  # the leftover of a commit that died before its manifest
            shutil.rmtree(final)
        self.folder.rename(final)
        temporary = final / "manifest.json.tmp"
        temporary.write_bytes(info.to_bytes())
        temporary.rename(final / "manifest.json")
        return final

    def discard(self) -> None:
        """Deletes everything received."""
        self._close_files()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _close_files(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def map_version(folder: Path, manifest: PolicyVersion) -> dict[str, np.ndarray]:
    """The tensors of a committed version folder, as read-only memory maps."""
    arrays: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(manifest.tensors):
        dtype = np.dtype(tensor.dtype)
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


def committed_versions(root: Path) -> list[tuple[int, Path, PolicyVersion]]:
    """Committed versions under ``root``, oldest first; removes interrupted uploads."""
    found = []
    if not root.is_dir():
        return found
    for entry in root.iterdir():
        if entry.name.startswith(".upload-"):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith("v") and (entry / "manifest.json").is_file():
            manifest = PolicyVersion.from_bytes((entry / "manifest.json").read_bytes())
            found.append((manifest.version, entry, manifest))
        elif entry.name.startswith("v"):
            shutil.rmtree(entry, ignore_errors=True)
    return sorted(found, key=lambda item: item[0])


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
