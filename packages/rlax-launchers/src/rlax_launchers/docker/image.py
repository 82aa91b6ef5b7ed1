"""The RLAX image, built from a checkout with no registry: what the docker launcher runs.

The repository's ``Dockerfile`` is the path for machines that can pull
``python:3.11-slim-bookworm``. This module builds the same image where none can be
pulled, in the same steps:

1. the base: a root filesystem of Debian packages (Python 3 and its headers, bubblewrap
   and g++ for the local sandbox, CA certificates, a shell), unpacked and imported with core's
   :mod:`rlax_core.kit.images` (cached on disk and in the engine by the hash of its
   inputs);
2. the install: the workspace's ``pyproject.toml``, ``uv.lock``, ``README.md`` and
   ``packages/`` copied to ``/opt/rlax/src``, and the Dockerfile's own
   :data:`INSTALL_COMMAND` run there with its environment (:data:`UV_ENV`), by the uv
   of this machine, mounted in for the step; then ``rlax plugins``, the Dockerfile's
   last check;
3. the commit, with the Dockerfile's ``PATH``, working folder and command.

JAX is the CPU build (the Dockerfile's ``--build-arg JAX_EXTRA=``). The image is tagged
``rlax:cpu-<hash of every input>`` and ``rlax:cpu``; a checkout whose inputs did not
change costs one lookup. Where this machine's user is root, uv's cache is mounted into
the install step, so the locked wheels are copied, not downloaded again. Run it as::

    python -m rlax_launchers.docker.image [--source CHECKOUT] [--tag rlax:cpu]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
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

REPOSITORY = "rlax"
DEFAULT_TAG = "rlax:cpu"
BASE_REPOSITORY = "rlax-base"
BASE_PACKAGES = (
    "python3-minimal",
    "libpython3-stdlib",
    "libpython3-dev",  # Python.h: the locked sdists without a wheel (pycosat) build here
    "bubblewrap",
    "g++",
    "ca-certificates",
    "dash",
    "coreutils",
)
SOURCE_DIR = "/opt/rlax/src"
VENV_DIR = "/opt/rlax/venv"
INSTALL_COMMAND = "uv sync --locked --no-dev --all-packages --no-editable"
"""The Dockerfile's ``RUN`` line that installs the workspace (a test holds them equal)."""
UV_ENV = {
    "UV_PROJECT_ENVIRONMENT": VENV_DIR,
    "UV_LINK_MODE": "copy",
    "UV_COMPILE_BYTECODE": "1",
}
"""The Dockerfile's ``ENV`` for uv."""
PATH = f"{VENV_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_CHANGES = (
    f"ENV PATH={PATH}",
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    "WORKDIR /opt/rlax",
    'CMD ["rlax", "--help"]',
)
_WORKSPACE_FILES = ("pyproject.toml", "uv.lock", "README.md")
# What the Dockerfile's context leaves out (.dockerignore), and the packages' tests.
_SKIPPED_DIRS = {"__pycache__", ".venv", ".pytest_cache", ".ruff_cache", "tests"}
_UV_CACHE_MOUNT = "/uv-cache"
_CA_MOUNT = "/etc/rlax-build/ca-certificates.crt"
_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def find_checkout(start: Path) -> Path:
    """The workspace checkout at or above ``start``.

    Raises:
        ImageBuildError: none (the image is built from a checkout of the repository).
    """
    for folder in [start, *start.parents]:
        if (folder / "uv.lock").is_file() and (folder / "packages" / "rlax-core").is_dir():
            return folder
    raise ImageBuildError(
        f"{start} is not inside an RLAX checkout (a folder with uv.lock and packages/); "
        "the image is built from the repository: clone it and pass --source CHECKOUT"
    )


def source_files(checkout: Path) -> Iterator[tuple[str, Path]]:
    """(path in the image's source folder, file) of everything the install step reads."""
    for name in _WORKSPACE_FILES:
        yield name, checkout / name
    packages = checkout / "packages"
    for folder, dirs, files in os.walk(packages):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            if not name.endswith(".pyc"):
                path = here / name
                yield str(path.relative_to(checkout)), path


def image_tag(checkout: Path, uv: str) -> str:
    """``rlax:cpu-<hash>`` of the base, uv's version, the install step and every source."""
    parts = [
        rootfs_digest(BASE_PACKAGES).encode(),
        _uv_version(uv).encode(),
        INSTALL_COMMAND.encode(),
        repr(sorted(UV_ENV.items())).encode(),
        repr(IMAGE_CHANGES).encode(),
    ]
    for name, path in source_files(checkout):
        parts.append(name.encode() + b"\0" + path.read_bytes())
    return f"{REPOSITORY}:cpu-{content_digest(*parts)}"


def ensure_rlax_image(
    client: Any,
    checkout: Path,
    *,
    tag: str = DEFAULT_TAG,
    log: Callable[[str], None] = lambda _: None,
) -> str:
    """Builds the image of ``checkout`` unless the engine has it; tags it ``tag`` too.

    Returns:
        The content tag (``rlax:cpu-<hash>``).

    Raises:
        ImageBuildError: no uv, no Debian host, or a step failed (its output's tail).
    """
    uv = _find_uv()
    content = image_tag(checkout, uv)
    if not image_exists(client, content):
        started = time.monotonic()
        base = _ensure_base(client, log)
        _install(client, base, checkout, uv, content, log)
        log(f"built {content} in {time.monotonic() - started:.0f} s")
    repository, version = tag.rsplit(":", 1)
    client.images.get(content).tag(repository, version)
    # After the move of ``tag``: an earlier image holds only its content tag then, and
    # goes whole, not left behind untagged.
    remove_older(client, REPOSITORY, "cpu-", content)
    return content


def _ensure_base(client: Any, log: Callable[[str], None]) -> str:
    base = f"{BASE_REPOSITORY}:{rootfs_digest(BASE_PACKAGES)}"
    if image_exists(client, base):
        return base
    rootfs = debian_rootfs("rlax", BASE_PACKAGES, log)
    log(f"importing {base}")

    def folders(tar: tarfile.TarFile) -> None:
        for folder in ("opt", "opt/rlax", SOURCE_DIR.lstrip("/")):
            add_directory(tar, folder)

    import_image(client, rootfs, base, folders)
    remove_older(client, BASE_REPOSITORY, "", base)
    return base


def _install(
    client: Any, base: str, checkout: Path, uv: str, tag: str, log: Callable[[str], None]
) -> None:
    """The install step in a container of ``base``, committed as ``tag``."""
    from docker.types import Mount

    mounts = [Mount("/usr/local/bin/uv", uv, type="bind", read_only=True)]
    env = {**UV_ENV, "PATH": PATH, "UV_PYTHON": "/usr/bin/python3", "UV_PYTHON_DOWNLOADS": "never"}
    if os.geteuid() == 0:  # the cache's files stay root's, like everything else of root's
        mounts.append(Mount(_UV_CACHE_MOUNT, _uv_cache_dir(uv), type="bind"))
        env["UV_CACHE_DIR"] = _UV_CACHE_MOUNT
    else:  # a cache of the step's own, left out of the image
        env["UV_CACHE_DIR"] = "/tmp/uv-cache"
    # A machine behind a proxy reaches the package index through it, with its CA.
    env.update({name: os.environ[name] for name in _PROXY_ENV if os.environ.get(name)})
    certificates = os.environ.get("SSL_CERT_FILE")
    if certificates and Path(certificates).is_file():
        mounts.append(Mount(_CA_MOUNT, str(Path(certificates).resolve()), type="bind",
                            read_only=True))  # fmt: skip
        env["SSL_CERT_FILE"] = _CA_MOUNT
    script = f"{INSTALL_COMMAND} && rm -rf /tmp/uv-cache && cd /opt/rlax && rlax plugins"
    container = client.containers.create(
        base, ["/bin/sh", "-c", script], environment=env, working_dir=SOURCE_DIR,
        mounts=mounts, network_mode="host", labels={"rlax.image-build": checkout.name},
    )  # fmt: skip
    try:
        container.put_archive(SOURCE_DIR, _source_archive(checkout))
        log(f"installing the workspace into {tag} ({INSTALL_COMMAND})")
        container.start()
        code = container.wait()["StatusCode"]
        output = container.logs().decode(errors="replace")
        if code != 0:
            raise ImageBuildError(
                f"the install step of {tag} exited with status {code}:\n{output[-2000:]}"
            )
        repository, version = tag.rsplit(":", 1)
        container.commit(repository=repository, tag=version, changes=list(IMAGE_CHANGES))
    finally:
        container.remove(force=True)


def _source_archive(checkout: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        made: set[str] = set()
        for name, path in source_files(checkout):
            parents = Path(name).parents
            for parent in reversed([str(p) for p in parents if str(p) != "."]):
                if parent not in made:
                    add_directory(tar, parent)
                    made.add(parent)
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def _find_uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        raise ImageBuildError(
            "building the RLAX image needs uv (the install step runs it): install it "
            "(https://docs.astral.sh/uv/) or set UV to its path"
        )
    return str(Path(uv).resolve())


def _uv_version(uv: str) -> str:
    return subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout


def _uv_cache_dir(uv: str) -> str:
    done = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, check=True)
    folder = Path(done.stdout.strip())
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def main(argv: list[str] | None = None) -> int:
    """Builds the image (see the module docstring); prints its content tag."""
    parser = argparse.ArgumentParser(
        prog="python -m rlax_launchers.docker.image",
        description="Build the RLAX image from a checkout, offline (no registry needed).",
    )
    parser.add_argument("--source", type=Path, default=Path.cwd(), help="the checkout")
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"also tag it (default {DEFAULT_TAG})")
    args = parser.parse_args(argv)
    import docker

    try:
        checkout = find_checkout(args.source.resolve())
        tag = ensure_rlax_image(
            docker.from_env(), checkout, tag=args.tag, log=lambda m: print(m, file=sys.stderr)
        )
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
