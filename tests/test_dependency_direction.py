"""Plugins depend on core; core knows no plugin; plugins never import each other."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())
PLUGIN_MODULES = ("rlax_transport_nats", "rlax_transport_grpc", "rlax_verifiers", "rlax_launchers")
# Core may not import plugins or the SDKs that only plugins use.
CORE_FORBIDDEN = (*PLUGIN_MODULES, "nats", "grpc", "docker", "boto3", "botocore", "kubernetes")


def _imports(package_dir: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (package_dir / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


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
