"""Run configs are typed: a type checker reads a misspelled field as an error.

The run config model is built at run time from the installed plugins, so code is typed
against its static base, ``RunConfigBase``. This checks that the base gives a type
checker (mypy) what it needs: the fixed sections with their fields, the plugin
sections as ``BaseModel``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SNIPPET = """\
from pydantic import BaseModel

from rlax_core.config import RunConfigBase


def budget(config: RunConfigBase) -> int:
    return config.rollout.max_new_tokens * config.rollout.samples_per_prompt


def misspelled(config: RunConfigBase) -> int:
    return config.rollout.max_new_tokns


def transport(config: RunConfigBase) -> BaseModel:
    return config.transport


def judge(config: RunConfigBase) -> BaseModel | None:
    return config.verifier.judge if config.verifier is not None else None
"""


def test_a_misspelled_field_is_a_type_error_and_the_rest_type_checks(tmp_path: Path) -> None:
    source = tmp_path / "uses_config.py"
    source.write_text(SNIPPET)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout + result.stderr
    assert f"{source.name}:11:" in errors[0]
    assert '"RolloutSection" has no attribute "max_new_tokns"' in errors[0]
