"""The sandbox image: built by the project, offline, cached under a content tag.

Two flavours: ``python`` (the interpreter and its standard library) and ``cpp`` (also
g++). The offline path, which needs no registry, is core's (:mod:`rlax_core.kit.images`):
the Debian packages' dependency closure unpacked into a folder (cached on disk), and
that tree plus this project's ``isolate`` package (at ``/opt/rlax/isolate``) imported
with ``docker import``. The tag is a hash of everything that goes in, so an image is
rebuilt only when its inputs change, and an up-to-date one costs a single lookup. Users
with a registry can build ``Dockerfile`` beside this module instead (see :func:`main`).
"""

from __future__ import annotations

import argparse
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlax_core.kit.images import (
    ImageBuildError,
    add_directory,
    content_digest,
    debian_rootfs,
    image_exists,
    import_image,
    remove_older,
    rootfs_digest,
)
from rlax_verifiers.sandbox import SandboxUnavailableError
from rlax_verifiers.sandbox.isolate import batch

HERE = Path(__file__).resolve().parent
ISOLATE_DIR = Path(batch.__file__).resolve().parent
REPOSITORY = "rlax-sandbox"
FLAVOURS: dict[str, tuple[str, ...]] = {
    "python": ("python3-minimal", "libpython3-stdlib"),
    "cpp": ("python3-minimal", "libpython3-stdlib", "g++"),
}


def _isolate_files() -> list[Path]:
    return sorted(p for p in ISOLATE_DIR.glob("*.py"))


def image_tag(flavour: str) -> str:
    """``rlax-sandbox:<flavour>-<hash of every input>``."""
    files = [p.name.encode() + b"\0" + p.read_bytes() for p in _isolate_files()]
    digest = content_digest(rootfs_digest(FLAVOURS[flavour]).encode(), *files)
    return f"{REPOSITORY}:{flavour}-{digest}"


def ensure_image(client: Any, flavour: str, log: Callable[[str], None] = lambda _: None) -> str:
    """The tag of an up-to-date sandbox image of ``flavour``, building it if missing.

    Raises:
        SandboxUnavailableError: it cannot be built here (the message says why).
    """
    tag = image_tag(flavour)
    if image_exists(client, tag):
        return tag
    try:
        rootfs = debian_rootfs(f"sandbox-{flavour}", FLAVOURS[flavour], log)
        log(f"importing {tag}")
        import_image(client, rootfs, tag, _add_isolate)
    except ImageBuildError as exc:
        raise SandboxUnavailableError(
            f"{exc} (or build the Dockerfile in {HERE}: "
            "python -m rlax_verifiers.sandbox.docker.image --dockerfile)"
        ) from None
    remove_older(client, REPOSITORY, f"{flavour}-", tag)
    return tag


def _add_isolate(tar: tarfile.TarFile) -> None:
    add_directory(tar, "sandbox", 0o711)  # the mount point of the programs' tmpfs
    for folder in ("opt", "opt/rlax", "opt/rlax/isolate"):
        add_directory(tar, folder)
    for path in _isolate_files():
        tar.add(path, arcname=f"opt/rlax/isolate/{path.name}")


def main(argv: list[str] | None = None) -> int:
    """Builds the image: offline (default) or from the Dockerfile (needs a registry)."""
    parser = argparse.ArgumentParser(description="Build the rlax docker sandbox image.")
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), default="cpp")
    parser.add_argument("--dockerfile", action="store_true", help="docker build the Dockerfile")
    args = parser.parse_args(argv)
    import docker

    client = docker.from_env()
    if args.dockerfile:
        with tempfile.TemporaryDirectory() as context:
            shutil.copy(HERE / "Dockerfile", Path(context) / "Dockerfile")
            shutil.copytree(ISOLATE_DIR, Path(context) / "isolate",
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
            tag = image_tag(args.flavour)
            client.images.build(path=context, tag=tag, rm=True)
    else:
        tag = ensure_image(client, args.flavour, log=print)
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
