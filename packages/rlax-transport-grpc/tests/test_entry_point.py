"""The rlax-transport-grpc plugin is found through its ``rlax`` entry point."""

from __future__ import annotations

import importlib.metadata

from rlax_core.plugins import load_registry


def test_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="rlax") if ep.name == "grpc"
    ]
    assert entry_point.value == "rlax_transport_grpc.plugin"
    assert entry_point.dist.name == "rlax-transport-grpc"
    assert entry_point.load().__name__ == "rlax_transport_grpc.plugin"


def test_the_package_is_listed_as_loaded() -> None:
    assert "rlax-transport-grpc" in load_registry().loaded_packages
