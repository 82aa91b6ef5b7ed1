"""Loading a ``verifiers`` environment, once per process for the same settings."""

from __future__ import annotations

import json
import threading
from types import ModuleType
from typing import Any

from pydantic import BaseModel, Field

from rlax_core.errors import ConfigError

_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


class EnvironmentSpec(BaseModel):
    """Which ``verifiers`` environment, with what settings."""

    environment: str = Field(
        description="Its id: the module that defines load_environment() (installed, or on "
        "the Python path; dashes read as underscores, as `vf-eval` reads them)."
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of its load_environment()."
    )


def verifiers() -> ModuleType:
    """The ``verifiers`` module.

    Raises:
        ConfigError: it is not installed.
    """
    try:
        import verifiers
    except ImportError:
        raise ConfigError(
            "prime's verifiers library is not installed: pip install 'rlax-verifiers[prime]'"
        ) from None
    return verifiers


def load(spec: EnvironmentSpec) -> Any:
    """The environment of ``spec`` (the prompt source and the environment share it).

    Raises:
        ConfigError: it cannot be loaded.
    """
    key = json.dumps([spec.environment, spec.args], sort_keys=True, default=str)
    with _LOCK:
        if key not in _LOADED:
            vf = verifiers()
            try:
                environment = vf.load_environment(spec.environment, **spec.args)
            except Exception as exc:  # not found, or its loader failed: its own words
                raise ConfigError(
                    f"the verifiers environment {spec.environment!r} cannot be loaded with "
                    f"{spec.args}: {type(exc).__name__}: {exc}"
                ) from None
            if not isinstance(environment, vf.Environment):
                raise ConfigError(f"load_environment() of {spec.environment!r} returned a "
                                  f"{type(environment).__name__}, not a verifiers "
                                  "Environment")  # fmt: skip
            _LOADED[key] = environment
        return _LOADED[key]
