"""Running ``gcloud``: a real subprocess, and errors that say what failed and why."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

from rlax_core.errors import RlaxError

_STDERR_TAIL_LINES = 15


class GcloudError(RlaxError):
    """``gcloud`` is missing, or one of its commands failed."""


class GcloudNotFoundError(GcloudError):
    """No ``gcloud`` executable on ``PATH``."""


def run_gcloud(argv: list[str], *, capture_stdout: bool = False) -> str:
    """Runs one ``gcloud`` command and returns its standard output (when captured).

    The command's standard error (gcloud's progress) is passed on to ours once it ends;
    its last lines are part of the error when it fails.

    Args:
        argv: the command, ``argv[0] == "gcloud"``.
        capture_stdout: return standard output instead of passing it on.

    Raises:
        GcloudNotFoundError: ``gcloud`` is not on ``PATH``.
        GcloudError: the command exited with a non-zero status.
    """
    executable = shutil.which(argv[0])
    if executable is None:
        raise GcloudNotFoundError(
            f"{argv[0]!r} is not on PATH, so the TPU VMs cannot be managed from here: install "
            "the Google Cloud CLI and run `gcloud auth login`, or print the commands with "
            "`rlax launch CONFIG --dry-run` and run them elsewhere"
        )
    try:
        result = subprocess.run(
            [executable, *argv[1:]],
            stdout=subprocess.PIPE if capture_stdout else None,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise GcloudError(f"could not run {executable}: {exc}") from None
    if result.stderr:
        sys.stderr.write(result.stderr)
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-_STDERR_TAIL_LINES:])
        raise GcloudError(
            f"`{shlex.join(argv)}` failed with exit status {result.returncode}"
            + (f":\n{tail}" if tail else " and printed nothing")
        )
    return result.stdout or ""


def is_not_found(error: GcloudError) -> bool:
    """The command failed because the resource does not exist (already deleted)."""
    text = str(error)
    return "NOT_FOUND" in text or "not found" in text.lower()
