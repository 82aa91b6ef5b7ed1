"""Building the plugin manager and collecting what plugins register.

The order follows tox: hookspecs → built-in plugins → ``rlax`` entry points (filtered by
``RLAX_LOAD_PLUGINS``) → ``check_pending()``. Built-ins are plugins like any other.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from rlax_core import hookspecs
from rlax_core.errors import PluginError
from rlax_core.hookspecs import PLUGIN_KINDS
from rlax_core.plugins.registry import Registration, Registry, plugin_config_class

ENTRY_POINT_GROUP = "rlax"
LOAD_PLUGINS_ENV = "RLAX_LOAD_PLUGINS"
BUILTIN_PLUGINS = ("rlax_core.builtin_plugin",)


def make_plugin_manager(
    *, load_entry_points: bool = True, extra_plugins: Iterable[ModuleType | object] = ()
) -> pluggy.PluginManager:
    """Returns a new plugin manager with the built-ins, installed plugins and extras.

    Args:
        load_entry_points: load plugins installed under the ``rlax`` entry-point group,
            restricted to the names in ``$RLAX_LOAD_PLUGINS`` (comma-separated entry-point
            or package names; empty loads none) when it is set.
        extra_plugins: plugin objects to register as well (tests, embedding).

    Raises:
        PluginError: a plugin failed to import, implements an unknown hook, or
            ``RLAX_LOAD_PLUGINS`` names something not installed.
    """
    pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)
    for module_name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(module_name), name=module_name)
    if load_entry_points:
        _load_entry_points(pm)
    for plugin in extra_plugins:
        pm.register(plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(
            f"plugin {exc.plugin!r} implements a hook RLAX does not have: {exc}; "
            f"known hooks: {', '.join(PLUGIN_KINDS.values())}"
        ) from None
    return pm


def collect_registry(pm: pluggy.PluginManager) -> Registry:
    """Calls every plugin's register hooks and returns the filled registry.

    Each plugin's hook implementation gets its own ``register`` callback, so a clash can
    name the packages on both sides.
    """
    registry = Registry()
    origins = _plugin_origins(pm)
    for plugin_name, (package, version) in origins.items():
        if pm.get_plugin(plugin_name) is not None:
            registry.loaded_packages.setdefault(package, version)
    for kind, hook_name in PLUGIN_KINDS.items():
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            package, version = origins.get(impl.plugin_name, (impl.plugin_name, ""))

            def register(
                name: str,
                factory: Any,
                config_cls: Any,
                *,
                _kind: str = kind,
                _plugin: str = impl.plugin_name,
                _package: str = package,
                _version: str = version,
            ) -> None:
                if not callable(factory):
                    raise PluginError(
                        f"{_package} registers {_kind} {name!r} with a factory "
                        f"that is not callable: {factory!r}"
                    )
                registry.add(
                    Registration(
                        kind=_kind,
                        name=name,
                        factory=factory,
                        config_cls=plugin_config_class(_kind, name, config_cls, _package),
                        plugin=_plugin,
                        package=_package,
                        version=_version,
                    )
                )

            try:
                impl.function(register=register)
            except PluginError:
                raise  # the registry's refusal (a clash, a bad config class): it names both
            except Exception as exc:  # a broken third-party plugin must not be a traceback
                raise PluginError(_hook_failure(pm, impl.plugin_name, hook_name, exc)) from exc
    return registry


def load_registry(*, load_entry_points: bool = True) -> Registry:
    """The registry of everything installed: the usual entry point for the CLI and runs."""
    return collect_registry(make_plugin_manager(load_entry_points=load_entry_points))


def _installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    installed = _installed_entry_points()
    wanted = os.environ.get(LOAD_PLUGINS_ENV)
    if wanted is None:
        names = [None]
    else:
        requested = [w.strip() for w in wanted.split(",") if w.strip()]
        by_package = {ep.dist.name if ep.dist else ep.name: ep.name for ep in installed}
        names = []
        for w in requested:
            if w in {ep.name for ep in installed}:
                names.append(w)
            elif w in by_package:
                names.append(by_package[w])
            else:
                available = ", ".join(sorted({ep.name for ep in installed} | set(by_package)))
                raise PluginError(
                    f"{LOAD_PLUGINS_ENV} names {w!r}, which is not an installed rlax plugin "
                    f"(installed: {available or 'none'})"
                )
    for name in names:
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=name)
        except Exception as exc:  # a broken third-party plugin must not be a traceback
            culprit = _find_broken_entry_point(installed, name)
            raise PluginError(
                f"the rlax plugin {culprit} failed to load: {type(exc).__name__}: {exc}; "
                f"reinstall or uninstall it, or leave it out with {LOAD_PLUGINS_ENV}"
            ) from exc


def _find_broken_entry_point(
    installed: list[importlib.metadata.EntryPoint], name: str | None
) -> str:
    for ep in installed:
        if name is not None and ep.name != name:
            continue
        try:
            ep.load()
        except Exception:
            package = ep.dist.name if ep.dist else "?"
            return f"{ep.name!r} ({ep.value}, from package {package})"
    return repr(name) if name else "(unknown)"


def _hook_failure(
    pm: pluggy.PluginManager, plugin_name: str, hook_name: str, exc: Exception
) -> str:
    """What failed (the entry point and its package), where, and how to go on without it."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})"
    failure = f"{hook_name} raised {type(exc).__name__}: {exc}{where}"
    packages = {pm.get_name(p): dist.project_name for p, dist in pm.list_plugin_distinfo()}
    if plugin_name not in packages:  # registered directly (tests, embedding)
        return f"the rlax plugin {plugin_name!r} failed while plugins load: {failure}"
    package = packages[plugin_name]
    entry_point = next(
        (f"{ep.name} = {ep.value}" for ep in _installed_entry_points() if ep.name == plugin_name),
        plugin_name,
    )
    others = sorted({p for p in packages.values() if p != package})
    skip = f"{LOAD_PLUGINS_ENV}={','.join(others)}" if others else f"{LOAD_PLUGINS_ENV}="
    return (
        f"the rlax plugin {plugin_name!r} of package {package} (entry point "
        f"'{entry_point}') failed while plugins load: {failure}; fix, upgrade or "
        f"uninstall {package}, or run without it: {skip} (the plugins to load, by "
        "package or entry-point name)"
    )


def _plugin_origins(pm: pluggy.PluginManager) -> dict[str, tuple[str, str]]:
    """plugin name -> (package, version) for built-ins and entry-point plugins."""
    from rlax_core import __version__

    origins = {name: ("rlax-core", __version__) for name in BUILTIN_PLUGINS}
    for plugin, dist in pm.list_plugin_distinfo():
        origins[pm.get_name(plugin)] = (dist.project_name, dist.version)
    return origins
