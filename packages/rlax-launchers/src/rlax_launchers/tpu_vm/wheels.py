"""The RLAX wheels a ``tpu-vm`` run's hosts install, pinned by their sha256.

RLAX is on no package index (PyPI's ``rlax`` is DeepMind's unrelated library), so
``--apply`` builds the wheels of the distributions the run uses
(:func:`~rlax_launchers.run_packages.run_packages`) from the uv workspace rlax-core is
installed from (``uv build --package NAME --wheel``), and uploads each one to
``RUN_DIR/wheels/<sha256, 16 hex digits>/FILE``. A folder per content: a host that
reboots with an older start-up script (its slice's metadata) still finds exactly the
wheel that script names, even after a later ``--apply`` shipped changed code.

The start-up script copies exactly those files (``gcloud storage cp``), checks them with
``sha256sum -c``, and installs them by path; their third-party dependencies resolve from
the index as usual (pip's ``--require-hashes`` would demand a hash of every one of those
as well, so the RLAX wheels are checked on their own, before pip runs).

``--dry-run`` builds nothing: its scripts name each wheel's file as the build will, in
``RUN_DIR/wheels/UNBUILT/``, with ``UNBUILT`` for the hash, so a host given such a script
stops at the checksum. Only ``--apply`` builds, uploads and pins them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rlax_core.errors import ConfigError, RlaxError
from rlax_core.kit.launcher import filesystem, remote_scheme, storage_path
from rlax_launchers.run_packages import RunPackage

WHEELS_SUBDIR = "wheels"
UNBUILT = "UNBUILT"
_HASH_FOLDER_DIGITS = 16


@dataclass(frozen=True)
class Wheel:
    """One RLAX wheel the hosts install.

    Attributes:
        package: the distribution (its name and the extra it is installed with).
        file_name: the wheel's file name, e.g. ``rlax_core-0.1.0-py3-none-any.whl``.
        sha256: its hex digest (``UNBUILT`` in a dry run).
        url: where the hosts copy it from, ``gs://.../wheels/HASH/FILE``.
    """

    package: RunPackage
    file_name: str
    sha256: str
    url: str


def wheels_folder(shared_run_dir: str) -> str:
    """``RUN_DIR/wheels`` of the run directory the hosts share.

    Raises:
        ConfigError: the run directory is not in Cloud Storage, so the hosts (which copy
            with ``gcloud storage``) could not fetch the wheels.
    """
    if remote_scheme(shared_run_dir) != "gs":
        raise ConfigError(
            f"run directory {shared_run_dir!r}: the TPU VMs copy the RLAX wheels from the run "
            "directory with `gcloud storage`, so it must be gs://BUCKET/...; or set "
            "launcher.pip_packages to requirements the hosts can install from an index"
        )
    return f"{shared_run_dir.rstrip('/')}/{WHEELS_SUBDIR}"


def unbuilt_wheels(packages: list[RunPackage], shared_run_dir: str) -> list[Wheel]:
    """The wheels as ``--dry-run`` names them: the files the build makes, no hashes."""
    folder = f"{wheels_folder(shared_run_dir)}/{UNBUILT}"
    wheels = []
    for package in packages:
        name = f"{package.name.replace('-', '_')}-{package.version}-py3-none-any.whl"
        wheels.append(Wheel(package, name, UNBUILT, f"{folder}/{name}"))
    return wheels


def build_and_upload_wheels(
    packages: list[RunPackage], shared_run_dir: str, build_dir: Path
) -> list[Wheel]:
    """Builds the packages' wheels into ``build_dir`` and uploads them to the run directory.

    ``build_dir``'s old wheels are removed first, so it holds what the run ships. A wheel
    already uploaded (same content, same place) is not uploaded again.

    Raises:
        ConfigError: the run directory is not ``gs://`` (see :func:`wheels_folder`).
        RlaxError: no uv, no workspace to build from, or a build or upload failed.
    """
    folder = wheels_folder(shared_run_dir)
    built = build_wheels(packages, build_dir)
    wheels = []
    for package, path in zip(packages, built, strict=True):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        url = f"{folder}/{digest[:_HASH_FOLDER_DIGITS]}/{path.name}"
        wheels.append(Wheel(package, path.name, digest, url))
    upload_wheels(built, wheels)
    return wheels


def build_wheels(packages: list[RunPackage], build_dir: Path) -> list[Path]:
    """``uv build --package NAME --wheel`` for each package, from the RLAX workspace.

    Returns:
        The wheel of each package, in the order given.

    Raises:
        RlaxError: uv is missing, rlax-core is not installed from a workspace checkout,
            a build failed, or a built version differs from the installed one.
    """
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` sets $UV
    if uv is None:
        raise RlaxError(
            "uv is not on PATH, so the RLAX wheels the TPU VMs install cannot be built: "
            "install uv (https://docs.astral.sh/uv/), or set launcher.pip_packages"
        )
    workspace = workspace_root()
    build_dir.mkdir(parents=True, exist_ok=True)
    for old in build_dir.glob("*.whl"):
        old.unlink()
    wheels = []
    for package in packages:
        command = [uv, "build", "--package", package.name, "--wheel", "--out-dir", str(build_dir)]
        print(f"building the {package.name} wheel", file=sys.stderr, flush=True)
        result = subprocess.run(command, cwd=workspace, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise RlaxError(
                f"building the {package.name} wheel failed (`{' '.join(command)}` in "
                f"{workspace}, exit status {result.returncode}):\n{tail}"
            )
        prefix = f"{package.name.replace('-', '_')}-"
        found = sorted(build_dir.glob(f"{prefix}*.whl"))
        expected = [p for p in found if p.name.startswith(f"{prefix}{package.version}-")]
        if not expected:
            raise RlaxError(
                f"uv built {[p.name for p in found]} for {package.name}, but {package.version} "
                f"is the version installed here: reinstall the workspace (uv sync) so that "
                "what validated the config is what the hosts run"
            )
        wheels.append(expected[0])
    return wheels


def workspace_root() -> Path:
    """The uv workspace rlax-core is installed from (an editable install in a checkout).

    Raises:
        RlaxError: rlax-core is installed from a wheel, not from a checkout.
    """
    import rlax_core

    here = Path(rlax_core.__file__).resolve()
    for folder in here.parents:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.uv.workspace]" in pyproject.read_text():
            return folder
    raise RlaxError(
        f"rlax-core is installed from {here.parent}, not from a checkout of the RLAX "
        "workspace, so the wheels the TPU VMs install cannot be built here: run `rlax "
        "launch` from a checkout (uv sync --all-packages), or set launcher.pip_packages"
    )


def upload_wheels(paths: list[Path], wheels: list[Wheel]) -> None:
    """Copies each built wheel to its URL, unless an object of that size is there already
    (the URL names the content's hash).

    Raises:
        RlaxError: an upload failed.
    """
    for path, wheel in zip(paths, wheels, strict=True):
        target = storage_path(wheel.url)
        try:
            if target.exists() and filesystem(target).size(wheel.url) == path.stat().st_size:
                continue
            print(f"uploading {path.name} to {wheel.url}", file=sys.stderr, flush=True)
            filesystem(target).put(str(path), wheel.url)
        except Exception as exc:  # gcsfs's HTTP and credential errors share no base class
            raise RlaxError(f"uploading {path} to {wheel.url} failed: {exc}") from None
