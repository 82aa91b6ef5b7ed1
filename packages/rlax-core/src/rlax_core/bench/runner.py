"""Finding suites, running one, and writing its results as JSON."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rlax_core.bench.measure import Bench
from rlax_core.errors import ConfigError

BENCHMARKS_DIR_ENV = "RLAX_BENCHMARKS_DIR"


def find_benchmarks_dir(explicit: str | Path | None = None) -> Path:
    """The ``benchmarks/`` folder: given, from ``$RLAX_BENCHMARKS_DIR``, or above the cwd."""
    if explicit is None:
        explicit = os.environ.get(BENCHMARKS_DIR_ENV)
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise ConfigError(f"benchmarks folder {path} does not exist")
        return path
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "benchmarks").is_dir():
            return folder / "benchmarks"
    raise ConfigError(
        f"no benchmarks/ folder in {Path.cwd()} or above it; run from an RLAX checkout or "
        f"pass --dir (or set {BENCHMARKS_DIR_ENV})"
    )


def list_suites(folder: Path) -> dict[str, str]:
    """Suite name → first line of its docstring."""
    suites = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        suites[path.stem] = _first_docstring_line(path)
    return suites


def run_suite(
    name: str, folder: Path, *, quick: bool = False, out: Path | None = None
) -> tuple[Bench, Path]:
    """Runs ``folder/<name>.py``'s ``run(bench)`` and writes the results JSON.

    Returns:
        The filled :class:`Bench` and the path of the JSON written.
    """
    suites = list_suites(folder)
    if name not in suites:
        raise ConfigError(
            f"no benchmark suite {name!r} in {folder}; suites: {', '.join(suites) or 'none'}"
        )
    module = _import_suite(folder, name)
    bench = Bench(quick=quick)
    started = dt.datetime.now(dt.UTC)
    module.run(bench)
    report = {
        "suite": name,
        "started_at": started.isoformat(),
        "seconds": (dt.datetime.now(dt.UTC) - started).total_seconds(),
        "quick": quick,
        "machine": _machine(),
        "notes": bench.notes,
        "results": [c.to_json() for c in bench.results],
    }
    if out is None:
        stamp = started.strftime("%Y%m%dT%H%M%SZ")
        out = folder.parent / "bench-results" / f"{name}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return bench, out


def _import_suite(folder: Path, name: str) -> ModuleType:
    """Imports suite ``name`` as ``<package>.<name>``, the benchmarks folder being the package.

    The folder's parent goes first on ``sys.path``, so the suite and the helper modules it
    imports (``from benchmarks import _tunix_model``) are ordinary modules of one package.
    A package of the same name imported before from another folder (another checkout, a
    test's own suites) is forgotten first, so the folder asked for is the one imported.
    """
    folder = folder.resolve()
    package = folder.name
    if not package.isidentifier() or not (folder / "__init__.py").is_file():
        raise ConfigError(
            f"benchmarks folder {folder} is not a Python package: it needs an __init__.py "
            "and a name that is a Python identifier"
        )
    loaded = sys.modules.get(package)
    if loaded is not None and not _is_package_of(loaded, folder):
        for key in [k for k in sys.modules if k == package or k.startswith(f"{package}.")]:
            del sys.modules[key]
    root = str(folder.parent)
    if sys.path[:1] != [root]:
        while root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    importlib.invalidate_caches()
    module = importlib.import_module(f"{package}.{name}")
    if not _is_package_of(sys.modules[package], folder):
        raise ConfigError(f"importing {package} found {sys.modules[package]!r}, not {folder}")
    if not callable(getattr(module, "run", None)):
        raise ConfigError(f"benchmark suite {folder / name}.py has no run(bench) function")
    return module


def _is_package_of(module: ModuleType, folder: Path) -> bool:
    return any(Path(p).resolve() == folder for p in getattr(module, "__path__", ()))


def _first_docstring_line(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text()))
    return doc.strip().splitlines()[0] if doc else ""


def _machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
