"""The rlax-verifiers plugin is found through its ``rlax`` entry point."""

from __future__ import annotations

import importlib.metadata

from rlax_core.plugins import load_registry


def test_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="rlax") if ep.name == "verifiers"
    ]
    assert entry_point.value == "rlax_verifiers.plugin"
    assert entry_point.dist.name == "rlax-verifiers"
    assert entry_point.load().__name__ == "rlax_verifiers.plugin"


def test_the_package_is_listed_as_loaded() -> None:
    assert "rlax-verifiers" in load_registry().loaded_packages


def test_math_judge_is_registered_by_this_package() -> None:
    registration = load_registry().get("judge", "math")
    assert registration.package == "rlax-verifiers"
    assert registration.plugin == "verifiers"


def test_code_judge_and_sandboxes_are_registered() -> None:
    registry = load_registry()
    assert registry.get("judge", "code").package == "rlax-verifiers"
    assert registry.names("sandbox") == ["docker", "lambda", "local"]
