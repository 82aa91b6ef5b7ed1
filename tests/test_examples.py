"""Every shipped YAML run config is valid against the installed plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlax_core.config import load_run_config

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert any(p.name == "quickstart.yaml" for p in EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_is_valid(path: Path) -> None:
    config = load_run_config(path)
    assert config.run.name
