"""The sandbox image: built by the project, offline, cached under a content tag.

Two flavours: ``python`` (the interpreter and its standard library) and ``cpp`` (also
g++). The offline path, which needs no registry: ``build-rootfs.sh`` unpacks the
Debian packages' dependency closure into a directory (cached on disk), and that tree
plus this project's ``isolate`` package (at ``/opt/rlax/isolate``) is imported with
``docker import``. The tag is a hash of everything that goes in, so an image is rebuilt
only when its inputs change, and an up-to-date one costs a single lookup. Users with a
registry can build ``Dockerfile`` beside this module instead (see :func:`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlax_verifiers.sandbox import SandboxUnavailableError
from rlax_verifiers.sandbox.isolate import batch

HERE = Path(__file__).resolve().parent
ISOLATE_DIR = Path(batch.__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-rootfs.sh"
REPOSITORY = "rlax-sandbox"
FLAVOURS: dict[str, tuple[str, ...]] = {
    "python": ("python3-minimal", "libpython3-stdlib"),
    "cpp": ("python3-minimal", "libpython3-stdlib", "g++"),
}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def _rootfs_digest(flavour: str) -> str:
    return _digest(BUILD_SCRIPT.read_bytes(), " ".join(FLAVOURS[flavour]).encode())


def _isolate_files() -> list[Path]:
    return sorted(p for p in ISOLATE_DIR.glob("*.py"))


def image_tag(flavour: str) -> str:
    """``rlax-sandbox:<flavour>-<hash of every input>``."""
    files = [p.name.encode() + b"\0" + p.read_bytes() for p in _isolate_files()]
    return f"{REPOSITORY}:{flavour}-{_digest(_rootfs_digest(flavour).encode(), *files)}"


def cache_dir() -> Path:
    """Where built root filesystems are kept (``$XDG_CACHE_HOME/rlax/sandbox-rootfs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlax" / "sandbox-rootfs"


def ensure_image(client: Any, flavour: str, log: Callable[[str], None] = lambda _: None) -> str:
    """The tag of an up-to-date sandbox image of ``flavour``, building it if missing."""
    import docker.errors

    tag = image_tag(flavour)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    rootfs = _ensure_rootfs(flavour, log)
    log(f"importing {tag}")
    with tempfile.TemporaryDirectory(dir=rootfs.parent) as scratch:
        archive = Path(scratch) / "image.tar"
        _write_archive(rootfs, archive)
        repository, version = tag.split(":")
        client.api.import_image_from_file(str(archive), repository=repository, tag=version)
    client.images.get(tag)  # raises if the import did not produce it
    _remove_older(client, flavour, tag)
    return tag


def _remove_older(client: Any, flavour: str, keep: str) -> None:
    """Removes images of earlier inputs (with vfs storage each is a full copy on disk)."""
    import docker.errors

    for image in client.images.list(name=REPOSITORY):
        for tag in image.tags:
            if tag.startswith(f"{REPOSITORY}:{flavour}-") and tag != keep:
                # An image still in use by a container stays, and goes next time.
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(tag)


def _ensure_rootfs(flavour: str, log: Callable[[str], None]) -> Path:
    target = cache_dir() / f"{flavour}-{_rootfs_digest(flavour)}"
    if (target / ".complete").exists():
        return target
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise SandboxUnavailableError(
            "building the docker sandbox image offline needs a Debian-like host (apt-get, "
            "dpkg-deb); elsewhere build the Dockerfile in "
            f"{HERE} (python -m rlax_verifiers.sandbox.docker.image --dockerfile)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".partial")
    log(f"building the {flavour} sandbox root filesystem in {target}")
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(staging), *FLAVOURS[flavour]],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"building the {flavour} sandbox root filesystem failed: {done.stderr.strip()[-800:]}"
        )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / ".complete").touch()
    return target


def _write_archive(rootfs: Path, archive: Path) -> None:
    with tarfile.open(archive, "w") as tar:
        for entry in sorted(rootfs.iterdir()):
            if entry.name != ".complete":
                tar.add(entry, arcname=entry.name)
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
