"""The registry of implementations that plugins registered, by kind and name."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlax_core.errors import ConfigError, PluginError
from rlax_core.hookspecs import PLUGIN_KINDS

if TYPE_CHECKING:
    from rlax_core.config.run_config import RunConfigBase


_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Registration:
    """One implementation a plugin registered.

    Attributes:
        kind: one of :data:`~rlax_core.hookspecs.PLUGIN_KINDS`.
        name: the ``type`` a run config uses to select it.
        factory: ``factory(config, context)`` builds the implementation.
        config_cls: the plugin's config class, with ``type`` added and extra keys forbidden.
        plugin: the plugin's name (its entry point's name, or the built-in module).
        package: the distribution that ships the plugin.
        version: that distribution's version.
    """

    kind: str
    name: str
    factory: Callable[[Any, BuildContext], Any]
    config_cls: type[BaseModel]
    plugin: str
    package: str
    version: str

    @property
    def summary(self) -> str:
        """First line of the config class's docstring, the plugin's one-line description."""
        doc = self.config_cls.__doc__ or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""


class Registry:
    """Implementations by kind and name; refuses a name registered twice."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Registration]] = {kind: {} for kind in PLUGIN_KINDS}
        self.loaded_packages: dict[
            str, str
        ] = {}  # package -> version, even if it registered nothing

    def add(self, registration: Registration) -> None:
        """Adds a registration; raises ``PluginError`` if its name is taken."""
        existing = self._entries[registration.kind].get(registration.name)
        if existing is not None:
            raise PluginError(
                f"{registration.kind} {registration.name!r} is registered twice: by "
                f"{existing.package} (plugin {existing.plugin!r}) and by "
                f"{registration.package} (plugin {registration.plugin!r}); uninstall one, or "
                "exclude one with RLAX_LOAD_PLUGINS"
            )
        self._entries[registration.kind][registration.name] = registration

    def names(self, kind: str) -> list[str]:
        """Registered names of one kind, sorted."""
        return sorted(self._entries[kind])

    def all(self) -> list[Registration]:
        """Every registration, by kind then name."""
        return [self._entries[k][n] for k in PLUGIN_KINDS for n in self.names(k)]

    def get(self, kind: str, name: str) -> Registration:
        """The registration of ``kind`` called ``name``.

        Raises:
            PluginError: nothing of that name is installed; the message lists what is.
        """
        try:
            return self._entries[kind][name]
        except KeyError:
            installed = ", ".join(self.names(kind)) or "none"
            raise PluginError(
                f"no {kind} named {name!r} is installed (installed: {installed}); "
                "see `rlax plugins`"
            ) from None

    def plugin_config(self, kind: str, spec: Mapping[str, Any]) -> BaseModel:
        """The config of a plugin named inside another section (``{type: NAME, ...}``: an
        environment's tools, a dataset's prompt source), validated against that plugin's
        config class.

        Raises:
            ConfigError: the plugin is not installed or its settings are wrong.
        """
        name = spec.get("type") if isinstance(spec, Mapping) else None
        if not isinstance(name, str):
            raise ConfigError(f"a {kind} is given as {{type: NAME, ...}}, got {spec!r}")
        try:
            registration = self.get(kind, name)
        except PluginError as exc:
            raise ConfigError(str(exc)) from None
        try:
            return registration.config_cls.model_validate(dict(spec))
        except ValidationError as exc:
            raise ConfigError(f"{kind} {name!r}: {exc}") from None

    def build(self, kind: str, config: BaseModel, context: BuildContext) -> Any:
        """Builds the implementation selected by a validated plugin config."""
        registration = self.get(kind, config.type)  # type: ignore[attr-defined]
        return registration.factory(config, context)


@dataclass
class BuildContext:
    """What a factory may use besides its own config.

    Attributes:
        registry: to build other plugins (a code judge builds its sandbox).
        run_config: the whole validated run config, when building for a run.
        run_dir: the run directory, when there is one.
        config_path: the run config's file, when it came from one (a local launcher
            hands it to the processes it starts; relative paths in it start there).
        sandbox: a validated sandbox config to use instead of ``run_config``'s (what
            ``rlax verify --backend`` builds).
    """

    registry: Registry
    run_config: RunConfigBase | None = None
    run_dir: Path | None = None
    config_path: Path | None = None
    sandbox: BaseModel | None = None

    def build_sandbox(self) -> Any:
        """Builds the sandbox: ``sandbox`` if given, else ``run_config.verifier.sandbox``."""
        verifier = getattr(self.run_config, "verifier", None)
        sandbox = self.sandbox or getattr(verifier, "sandbox", None)
        if sandbox is None:
            installed = ", ".join(self.registry.names("sandbox")) or "none"
            raise PluginError(
                "this judge runs code and needs a sandbox: set verifier.sandbox in the run "
                f"config (installed sandboxes: {installed})"
            )
        return self.registry.build("sandbox", sandbox, self)

    def build_tool(self, spec: Mapping[str, Any]) -> Any:
        """Builds a tool from its config (``{type: NAME, ...}``, as an environment's
        config lists it); see :meth:`Registry.plugin_config`."""
        return self.registry.build("tool", self.registry.plugin_config("tool", spec), self)


def plugin_config_class(
    kind: str, name: str, config_cls: type[BaseModel], package: str
) -> type[BaseModel]:
    """Returns ``config_cls`` extended with ``type: Literal[name]`` and ``extra="forbid"``.

    Raises:
        PluginError: the name is malformed, the class is not a pydantic model, or a field
            has no description.
    """
    if not _NAME.match(name):
        raise PluginError(
            f"{package} registers {kind} {name!r}: names must match {_NAME.pattern} "
            "(lowercase letters, digits, '-' and '_')"
        )
    if not (isinstance(config_cls, type) and issubclass(config_cls, BaseModel)):
        raise PluginError(
            f"{package} registers {kind} {name!r} with config_cls={config_cls!r}; "
            "it must be a pydantic BaseModel subclass"
        )
    undocumented = [
        f for f, info in config_cls.model_fields.items() if f != "type" and not info.description
    ]
    if undocumented:
        raise PluginError(
            f"{package} registers {kind} {name!r} whose config fields {undocumented} have no "
            "description; every field needs Field(description=...)"
        )
    namespace = {
        "__annotations__": {"type": Literal[name]},  # type: ignore[valid-type]
        "type": Field(default=name, description=f"Selects the {name!r} {kind}."),
        "model_config": ConfigDict(extra="forbid"),
        "__module__": config_cls.__module__,
        "__doc__": config_cls.__doc__,
    }
    return type(config_cls.__name__, (config_cls,), namespace)
