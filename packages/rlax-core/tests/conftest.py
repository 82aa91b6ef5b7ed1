"""Fixtures shared by rlax-core's tests: the torch side venv and HF reference outputs."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
REFERENCE_SCRIPT = Path(__file__).parent / "models" / "hf_reference.py"
TORCH_VENV_SCRIPT = REPO / "scripts" / "lib" / "torch-venv.sh"


@pytest.fixture(scope="session")
def torch_python() -> Path:
    """The python of the side venv with torch (CPU) and transformers; made on first use."""
    result = subprocess.run([TORCH_VENV_SCRIPT], capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        pytest.fail(f"{TORCH_VENV_SCRIPT} failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def run_reference(torch_python: Path) -> Callable[..., str]:
    """Runs hf_reference.py in the torch venv; fails the test with its stderr on error."""
    return lambda *args: _run_reference(torch_python, *args)


def _run_reference(torch_python: Path, *args: str | Path) -> str:
    result = subprocess.run(
        [torch_python, REFERENCE_SCRIPT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        pytest.fail(f"hf_reference.py {args[0]} failed:\n{result.stderr[-3000:]}")
    return result.stdout


@pytest.fixture(scope="session")
def hf_reference(torch_python: Path) -> Path:
    """Tiny random HF checkpoints with their reference outputs, cached by script content."""
    digest = hashlib.sha256(REFERENCE_SCRIPT.read_bytes() + TORCH_VENV_SCRIPT.read_bytes())
    out = REPO / ".cache" / "hf-reference" / digest.hexdigest()[:16]
    if not (out / "COMPLETE").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        _run_reference(torch_python, "build", out)
    return out
