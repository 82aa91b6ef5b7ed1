"""Importing reasoning-gym, with a message that says how to install it."""

from __future__ import annotations

from types import ModuleType

from rlax_core.errors import ConfigError


def reasoning_gym() -> ModuleType:
    """The ``reasoning_gym`` module.

    Raises:
        ConfigError: it is not installed.
    """
    try:
        import reasoning_gym
    except ImportError:
        raise ConfigError(
            "reasoning-gym is not installed: pip install 'rlax-verifiers[reasoning-gym]'"
        ) from None
    return reasoning_gym
