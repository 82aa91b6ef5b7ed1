"""The rlax-launchers plugin is found through its ``rlax`` entry point."""

from __future__ import annotations

import importlib.metadata

from rlax_core.plugins import load_registry


def test_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="rlax") if ep.name == "launchers"
    ]
    assert entry_point.value == "rlax_launchers.plugin"
    assert entry_point.dist.name == "rlax-launchers"
    assert entry_point.load().__name__ == "rlax_launchers.plugin"


def test_the_package_is_listed_as_loaded() -> None:
    assert "rlax-launchers" in load_registry().loaded_packages
