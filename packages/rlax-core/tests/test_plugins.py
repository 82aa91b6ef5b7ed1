"""The plugin manager and registry, with a fresh manager and fake plugins per test."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from rlax_core.errors import PluginError
from rlax_core.hookspecs import hookimpl
from rlax_core.plugins import (
    BuildContext,
    collect_registry,
    load_registry,
    make_plugin_manager,
)


class EchoConfig(BaseModel):
    """Echoes completions back as rewards (a test judge)."""

    scale: float = Field(default=1.0, description="Multiplier of the reward.")


class EchoJudge:
    def __init__(self, config: EchoConfig) -> None:
        self.config = config


def make_echo(config: EchoConfig, context: BuildContext) -> EchoJudge:
    return EchoJudge(config)


class EchoPlugin:
    @hookimpl
    def register_judges(self, register):
        register("echo", make_echo, EchoConfig)


def _registry(*plugins: object):
    return collect_registry(make_plugin_manager(load_entry_points=False, extra_plugins=plugins))


def test_builtins_are_plugins_too() -> None:
    registry = _registry()
    inproc = registry.get("transport", "inproc")
    assert inproc.package == "rlax-core"
    assert inproc.plugin == "rlax_core.builtin_plugin"


def test_a_plugin_registers_a_judge_with_its_config() -> None:
    registry = _registry(EchoPlugin())
    registration = registry.get("judge", "echo")
    assert registration.summary == "Echoes completions back as rewards (a test judge)."
    config = registration.config_cls(scale=2.0)
    assert config.type == "echo"
    assert isinstance(config, EchoConfig)
    judge = registry.build("judge", config, BuildContext(registry))
    assert isinstance(judge, EchoJudge) and judge.config.scale == 2.0


def test_plugin_configs_forbid_unknown_keys() -> None:
    config_cls = _registry(EchoPlugin()).get("judge", "echo").config_cls
    with pytest.raises(ValueError, match="extra"):
        config_cls(scael=2.0)


def test_a_name_registered_twice_names_both_packages() -> None:
    class Clash:
        @hookimpl
        def register_transports(self, register):
            register("inproc", make_echo, EchoConfig)

    with pytest.raises(PluginError, match=r"transport 'inproc' is registered twice: by rlax-core"):
        _registry(Clash())


@pytest.mark.parametrize(
    ("name", "config_cls", "factory", "message"),
    [
        ("Bad Name", EchoConfig, make_echo, "names must match"),
        ("ok", dict, make_echo, "must be a pydantic BaseModel"),
        ("ok", EchoConfig, "not callable", "not callable"),
    ],
)
def test_malformed_registrations_are_refused(
    name: str, config_cls: object, factory: object, message: str
) -> None:
    class Bad:
        @hookimpl
        def register_judges(self, register):
            register(name, factory, config_cls)

    with pytest.raises(PluginError, match=message):
        _registry(Bad())


def test_undocumented_config_fields_are_refused() -> None:
    class Undocumented(BaseModel):
        scale: float = 1.0

    class Bad:
        @hookimpl
        def register_judges(self, register):
            register("undocumented", make_echo, Undocumented)

    with pytest.raises(PluginError, match=r"\['scale'\] have no description"):
        _registry(Bad())


def test_a_hook_rlax_does_not_have_is_refused() -> None:
    class Typo:
        @hookimpl
        def register_judgez(self, register):
            pass

    with pytest.raises(PluginError, match="register_judgez"):
        _registry(Typo())


def test_unknown_names_list_what_is_installed() -> None:
    registry = _registry(EchoPlugin())
    with pytest.raises(
        PluginError, match=r"no judge named 'echoo' is installed \(installed: echo\)"
    ):
        registry.get("judge", "echoo")


def test_installed_entry_points_are_loaded() -> None:
    registry = load_registry()
    assert "math" in registry.names("judge")
    assert registry.get("judge", "math").package == "rlax-verifiers"
    assert {"rlax-transport-nats", "rlax-transport-grpc", "rlax-launchers"} <= set(
        registry.loaded_packages
    )


def test_rlax_load_plugins_restricts_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLAX_LOAD_PLUGINS", "rlax-transport-nats")
    registry = load_registry()
    assert set(registry.loaded_packages) == {"rlax-core", "rlax-transport-nats"}
    assert registry.names("judge") == []
    monkeypatch.setenv("RLAX_LOAD_PLUGINS", "verifiers")  # an entry-point name works too
    assert load_registry().names("judge") == ["code", "math", "reasoning_gym"]
    monkeypatch.setenv("RLAX_LOAD_PLUGINS", "")
    assert set(load_registry().loaded_packages) == {"rlax-core"}


def test_rlax_load_plugins_with_an_unknown_name_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLAX_LOAD_PLUGINS", "rlax-nope")
    with pytest.raises(PluginError, match=r"'rlax-nope', which is not an installed rlax plugin"):
        load_registry()


def test_a_hook_that_raises_is_a_plugin_error_naming_the_plugin() -> None:
    class Broken:
        @hookimpl
        def register_judges(self, register):
            raise ValueError("no such model")

    manager = make_plugin_manager(load_entry_points=False)
    manager.register(Broken(), name="broken-judges")
    with pytest.raises(
        PluginError,
        match=r"the rlax plugin 'broken-judges' failed while plugins load: register_judges "
        r"raised ValueError: no such model \(at test_plugins.py:\d+\)",
    ):
        collect_registry(manager)
