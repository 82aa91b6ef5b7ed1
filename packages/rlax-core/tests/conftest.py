"""Fixtures shared by rlax-core's tests: the torch side venv and HF reference outputs."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import ROOT, _hf_reference, run_module

TORCH_VENV_SCRIPT = ROOT / "scripts" / "lib" / "torch-venv.sh"


@pytest.fixture(scope="session")
def torch_python() -> Path:
    """The python of the side venv with torch (CPU) and transformers; made on first use."""
    result = subprocess.run([TORCH_VENV_SCRIPT], capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        pytest.fail(f"{TORCH_VENV_SCRIPT} failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def run_reference(torch_python: Path) -> Callable[..., str]:
    """Runs benchmarks._hf_reference in the torch venv; fails the test with its stderr on error."""
    return lambda *args: _run_reference(torch_python, *args)


def _run_reference(torch_python: Path, *args: str | Path) -> str:
    # A process boundary, not an import: torch lives only in the side venv.
    result = run_module(
        torch_python, _hf_reference, *args, capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        pytest.fail(f"{_hf_reference.__name__} {args[0]} failed:\n{result.stderr[-3000:]}")
    return result.stdout


@pytest.fixture(scope="session")
def hf_reference(torch_python: Path) -> Path:
    """Tiny random HF checkpoints with their reference outputs, cached by script content."""
    reference = Path(_hf_reference.__file__).read_bytes()
    digest = hashlib.sha256(reference + TORCH_VENV_SCRIPT.read_bytes())
    out = ROOT / ".cache" / "hf-reference" / digest.hexdigest()[:16]
    out.parent.mkdir(parents=True, exist_ok=True)
    # Test processes (pytest-xdist) build it once: the first holds the lock, the others
    # wait and find it complete.
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "COMPLETE").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            _run_reference(torch_python, "build", out)
    return out
