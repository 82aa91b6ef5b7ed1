"""Plugins depend on core's contracts and kit only; core knows no plugin; plugins never import
each other."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from rlax_core.kit import PUBLIC_MODULES

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())
PLUGIN_MODULES = ("rlax_transport_nats", "rlax_transport_grpc", "rlax_verifiers", "rlax_launchers")
# Core may not import plugins or the SDKs that only plugins use.
CORE_FORBIDDEN = (*PLUGIN_MODULES, "nats", "grpc", "docker", "boto3", "botocore", "kubernetes")


def _imported_modules(package_dir: Path, root: Path = REPO) -> dict[str, set[str]]:
    """Every module the package's source imports (full dotted name) → the files that do."""
    found: dict[str, set[str]] = {}
    for path in (package_dir / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
                if node.module == "rlax_core":  # from rlax_core import x: x may be a module
                    names = [f"rlax_core.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(root)))
    return found


def _imports(package_dir: Path) -> dict[str, set[str]]:
    """Every top-level package the package's source imports → the files that do."""
    found: dict[str, set[str]] = {}
    for name, files in _imported_modules(package_dir).items():
        found.setdefault(name.split(".")[0], set()).update(files)
    return found


def _in_kit(module: str) -> bool:
    if module in ("rlax_core", "rlax_core.__version__"):
        return True
    return any(module == m or module.startswith(f"{m}.") for m in PUBLIC_MODULES)


def test_the_workspace_has_the_five_packages() -> None:
    assert [p.name for p in PACKAGES] == [
        "rlax-core",
        "rlax-launchers",
        "rlax-transport-grpc",
        "rlax-transport-nats",
        "rlax-verifiers",
    ]


def test_core_imports_no_plugin_and_no_plugin_sdk() -> None:
    imports = _imports(REPO / "packages" / "rlax-core")
    offending = {name: files for name, files in imports.items() if name in CORE_FORBIDDEN}
    assert offending == {}


@pytest.mark.parametrize("package", [p for p in PACKAGES if p.name != "rlax-core"], ids=str)
def test_plugins_import_no_other_plugin(package: Path) -> None:
    own = package.name.replace("-", "_")
    imports = _imports(package)
    others = {
        name: files for name, files in imports.items() if name in PLUGIN_MODULES and name != own
    }
    assert others == {}


@pytest.mark.parametrize("package", [p for p in PACKAGES if p.name != "rlax-core"], ids=str)
def test_plugins_import_only_the_contracts_and_the_kit_of_core(package: Path) -> None:
    outside = {
        module: files
        for module, files in _imported_modules(package).items()
        if module.split(".")[0] == "rlax_core" and not _in_kit(module)
    }
    assert outside == {}, (
        "plugins may import from rlax-core only the modules in rlax_core.kit.PUBLIC_MODULES; "
        "export what they need from a module of rlax_core.kit"
    )


def test_the_kit_check_catches_a_module_outside_it(tmp_path: Path) -> None:
    source = tmp_path / "src" / "plugin"
    source.mkdir(parents=True)
    (source / "a.py").write_text(
        "from rlax_core.kit.transport import prepare_version\n"
        "from rlax_core.rl.roles.worker import InferenceWorker\n"
        "from rlax_core import errors, __version__\n"
        "import rlax_core.cli.main\n"
    )
    modules = _imported_modules(tmp_path, root=tmp_path)
    assert sorted(m for m in modules if not _in_kit(m)) == [
        "rlax_core.cli.main",
        "rlax_core.rl.roles.worker",
    ]


@pytest.mark.parametrize("package", [p for p in PACKAGES if p.name != "rlax-core"], ids=str)
def test_plugins_declare_core_and_an_rlax_entry_point(package: Path) -> None:
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("rlax-core") for dep in project["dependencies"])
    assert not any(
        dep.startswith("rlax-") and not dep.startswith("rlax-core")
        for dep in project["dependencies"]
    )
    entry_points = project["entry-points"]["rlax"]
    assert list(entry_points.values()) == [f"{package.name.replace('-', '_')}.plugin"]


def test_members_move_together() -> None:
    versions = {
        tomllib.loads((p / "pyproject.toml").read_text())["project"]["version"] for p in PACKAGES
    }
    assert len(versions) == 1
