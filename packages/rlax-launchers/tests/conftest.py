"""Run configs for the launcher tests, validated against the installed plugins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.config import load_run_config
from rlax_core.plugins import Registry, load_registry

NATS = {"type": "nats", "servers": ["nats://10.0.0.1:4222"]}


@pytest.fixture(scope="session")
def registry() -> Registry:
    """Everything installed (the launchers, transports and verifiers)."""
    return load_registry()


@pytest.fixture
def write_run_config(tmp_path: Path) -> Callable[..., Path]:
    """Writes a run config file: a small run with the given launcher section."""

    def write(
        launcher: dict[str, Any] | None,
        *,
        transport: dict[str, Any] | None = None,
        workers: int = 2,
        run_dir: str | None = "gs://bucket/runs/demo",
        name: str = "demo",
        verifier: dict[str, Any] | None = None,
    ) -> Path:
        data: dict[str, Any] = {
            "run": {"name": name, "run_dir": run_dir},
            "rollout": {"workers": workers, "max_new_tokens": 16},
            "transport": transport or NATS,
            "verifier": {"judge": {"type": "math"}, **(verifier or {})},
        }
        if launcher is not None:
            data["launcher"] = launcher
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def make_run_config(
    write_run_config: Callable[..., Path], registry: Registry
) -> Callable[..., Any]:
    """A validated run config (see ``write_run_config`` for the arguments)."""

    def make(launcher: dict[str, Any] | None, **kwargs: Any) -> Any:
        return load_run_config(write_run_config(launcher, **kwargs), registry)

    return make
