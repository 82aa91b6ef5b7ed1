"""RLAX's benchmark suites, run by ``rlax bench SUITE``, and the modules they share.

A suite is a module ``benchmarks/<suite>.py`` with a ``run(bench)`` function; modules
whose names begin with ``_`` are helpers, not suites. The folder is a package of the
workspace, imported like any other: ``import benchmarks.generate``, ``from benchmarks
import _tunix_model``. The repository root is on ``sys.path`` for pytest (the root
pyproject's ``[tool.pytest.ini_options] pythonpath``) and for ``rlax bench``, which puts
the benchmarks folder's parent there before it imports a suite.

Some helpers run in a process of their own instead: a fresh interpreter whose memory is
measured, one reader process per inference worker, or the side venvs with torch
(scripts/lib/torch-venv.sh) or Tunix (scripts/lib/tunix-venv.sh) that have no RLAX in
them. That is a process boundary, not an import: :func:`run_module` starts
``python -m benchmarks.<helper>`` with the repository root as the working directory,
which puts this package on the child's path. So this file imports nothing beyond the
standard library: a side venv's python imports it too.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the working directory of :func:`module_command`'s processes."""


def module_command(python: str | Path, module: ModuleType | str, *args: Any) -> list[str]:
    """The command line that runs ``module`` as ``__main__`` under ``python``.

    Run it with ``cwd=ROOT``, where ``-m`` finds this package.
    """
    name = module if isinstance(module, str) else module.__name__
    return [str(python), "-m", name, *map(str, args)]


def run_module(
    python: str | Path, module: ModuleType | str, *args: Any, **kwargs: Any
) -> subprocess.CompletedProcess:
    """Runs ``python -m <module> ARGS...`` from the repository root (``subprocess.run``).

    ``module`` is a helper of this package, or its dotted name where this interpreter
    cannot import it (a Tunix helper). ``kwargs`` go to :func:`subprocess.run`.
    """
    return subprocess.run(module_command(python, module, *args), cwd=ROOT, **kwargs)


def side_python(script: str) -> Path | None:
    """The python of a side venv made by ``scripts/lib/<script>`` (None if it cannot be
    made: the suite leaves that baseline out)."""
    result = subprocess.run([ROOT / "scripts" / "lib" / script], capture_output=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else None


def side_engine(
    python: Path, module: ModuleType | str, command: list[str], checkpoint: Path, job: dict
) -> dict:
    """Runs a helper module in a side venv on ``checkpoint`` with ``job`` (as JSON), and
    returns the JSON it writes: ``python -m MODULE COMMAND... CKPT JOB.json OUT.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "job.json").write_text(json.dumps(job))
        done = run_module(
            python, module, *command, checkpoint, work / "job.json", work / "out.json",
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
            raise RuntimeError(
                f"{' '.join(module_command(python, module, *command))} failed with exit "
                f"status {done.returncode}; the end of its output:\n{tail}"
            )
        return json.loads((work / "out.json").read_text())
