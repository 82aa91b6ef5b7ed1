"""The plugin system: hookspecs in :mod:`rlax_core.hookspecs`, registry and manager here."""

from rlax_core.plugins.manager import (
    ENTRY_POINT_GROUP,
    LOAD_PLUGINS_ENV,
    collect_registry,
    load_registry,
    make_plugin_manager,
)
from rlax_core.plugins.registry import BuildContext, Registration, Registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "LOAD_PLUGINS_ENV",
    "BuildContext",
    "Registration",
    "Registry",
    "collect_registry",
    "load_registry",
    "make_plugin_manager",
]
