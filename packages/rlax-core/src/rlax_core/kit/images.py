"""Container images built with no registry: a root filesystem from Debian packages,
imported into the local Docker engine under a tag that names its inputs.

The verifiers' sandbox image and the RLAX image itself are built this way where no
image can be pulled. ``debian-rootfs.sh`` (beside this module) unpacks the dependency
closure of the Debian packages named into a folder, cached on disk by the hash of the
script and the package list; :func:`import_image` writes that folder, and whatever the
caller adds, as one layer with ``docker import``. Tags carry a hash of every input
(:func:`content_digest`), so an image is rebuilt only when something that goes into it
changed, and an up-to-date one costs a single lookup.

The functions take a docker-py client (``docker.from_env()``) and use only its methods:
core itself neither depends on docker-py nor imports it; the plugins that build images do.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlax_core.errors import RlaxError

ROOTFS_SCRIPT = Path(__file__).resolve().parent / "debian-rootfs.sh"


class ImageBuildError(RlaxError):
    """An image could not be built here; the message says why and what to do instead."""


def content_digest(*parts: bytes) -> str:
    """A short hash of ``parts`` (each length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def rootfs_digest(packages: Sequence[str]) -> str:
    """The hash of a root filesystem's inputs: the build script and the package list."""
    return content_digest(ROOTFS_SCRIPT.read_bytes(), " ".join(packages).encode())


def cache_dir() -> Path:
    """Where built root filesystems are kept (``$XDG_CACHE_HOME/rlax/rootfs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlax" / "rootfs"


def debian_rootfs(
    name: str, packages: Sequence[str], log: Callable[[str], None] = lambda _: None
) -> Path:
    """The folder of a root filesystem of ``packages`` (built once, then cached).

    Raises:
        ImageBuildError: the host has no apt-get/dpkg-deb, or the build failed.
    """
    target = cache_dir() / f"{name}-{rootfs_digest(packages)}"
    if (target / ".complete").exists():
        return target
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ImageBuildError(
            f"building the {name} image offline needs a Debian-like host (apt-get, dpkg-deb); "
            "elsewhere build its Dockerfile on a machine that can pull images"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".partial")
    log(f"building the {name} root filesystem in {target}")
    done = subprocess.run(
        ["bash", str(ROOTFS_SCRIPT), str(staging), *packages],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ImageBuildError(
            f"building the {name} root filesystem failed: {done.stderr.strip()[-800:]}"
        )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").touch()
    return target


def image_exists(client: Any, tag: str) -> bool:
    """Whether the engine holds an image tagged ``tag``."""
    return any(tag in image.tags for image in client.images.list(name=tag))


def import_image(
    client: Any,
    rootfs: Path,
    tag: str,
    add: Callable[[tarfile.TarFile], None] = lambda _: None,
    *,
    changes: Sequence[str] = (),
) -> None:
    """``docker import`` of ``rootfs`` plus what ``add`` puts in the archive, as ``tag``.

    Args:
        changes: Dockerfile instructions for the image's config (``ENV``, ``CMD``, ...).

    Raises:
        ImageBuildError: the engine did not produce the image.
    """
    with tempfile.TemporaryDirectory(dir=rootfs.parent) as scratch:
        archive = Path(scratch) / "image.tar"
        with tarfile.open(archive, "w") as tar:
            for entry in sorted(rootfs.iterdir()):
                if entry.name != ".complete":
                    tar.add(entry, arcname=entry.name)
            add(tar)
        repository, version = tag.rsplit(":", 1)
        client.api.import_image_from_file(
            str(archive), repository=repository, tag=version, changes=list(changes) or None
        )
    if not image_exists(client, tag):
        raise ImageBuildError(f"docker import did not produce {tag}; see the engine's log")


def add_directory(tar: tarfile.TarFile, path: str, mode: int = 0o755, uid: int = 0) -> None:
    """A folder entry in an image archive (parents of added files need one)."""
    info = tarfile.TarInfo(path)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.uid = info.gid = uid
    tar.addfile(info)


def remove_older(client: Any, repository: str, prefix: str, keep: str) -> None:
    """Removes the images of ``repository`` tagged ``prefix…`` but ``keep`` (earlier
    inputs; with vfs storage each is a full copy on disk)."""
    for image in client.images.list(name=repository):
        for tag in image.tags:
            if tag.startswith(f"{repository}:{prefix}") and tag != keep:
                # An image still in use by a container stays, and goes next time (the
                # engine's refusal is docker-py's APIError, which core does not import).
                with contextlib.suppress(Exception):
                    client.images.remove(tag)
