"""The hooks through which plugins add transports, sandboxes, judges, environments,
tools, prompt sources and launchers.

A plugin is a module (found through an ``rlax`` entry point) with functions marked
``@hookimpl`` whose names match the hooks below. Each hook is called exactly once per
plugin, when the plugin manager is built, with a ``register`` callback::

    from rlax_core.hookspecs import hookimpl

    @hookimpl
    def register_judges(register):
        register("exact_match", make_exact_match_judge, ExactMatchConfig)

``register(name, factory, config_cls)``:

* ``name`` is what a run config writes as ``type:`` (lowercase letters, digits, ``-``,
  ``_``). A name registered twice for the same kind is an error naming both packages.
* ``config_cls`` is a pydantic model of the plugin's settings; every field needs a
  ``description``. RLAX adds the ``type`` field and forbids unknown keys.
* ``factory(config, context)`` builds the implementation from a validated
  ``config_cls`` instance and a :class:`rlax_core.plugins.BuildContext`.

Results are not combined: hooks return nothing; core owns the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pluggy
from pydantic import BaseModel

hookspec = pluggy.HookspecMarker("rlax")
hookimpl = pluggy.HookimplMarker("rlax")


class Register(Protocol):
    """The callback a hook receives; see the module docstring."""

    def __call__(
        self, name: str, factory: Callable[[Any, Any], Any], config_cls: type[BaseModel]
    ) -> None: ...


@hookspec
def register_transports(register: Register) -> None:
    """Registers transports: factories returning a :class:`rlax_core.contracts.Transport`.

    Called once per plugin when the plugin manager is built. The run config selects one
    with ``transport: {type: NAME, ...}``.
    """


@hookspec
def register_transport_servers(register: Register) -> None:
    """Registers servers for networked transports: factories returning a
    :class:`rlax_core.contracts.TransportServer`.

    Called once per plugin when the plugin manager is built. Register each server under
    the name of the transport it serves and with that transport's config class, so the
    server and its clients are configured by the same ``transport:`` section.
    ``rlax serve param-server --transport NAME`` (and the launchers) look the server up
    here; a transport without a registered server (``inproc``) needs none.
    """


@hookspec
def register_sandboxes(register: Register) -> None:
    """Registers sandbox backends: factories returning a ``SandboxBackend``.

    Called once per plugin when the plugin manager is built. The run config selects one
    with ``verifier: {sandbox: {type: NAME, ...}}``.
    """


@hookspec
def register_judges(register: Register) -> None:
    """Registers judges (reward functions): factories returning a ``Judge``.

    Called once per plugin when the plugin manager is built. The run config selects one
    with ``verifier: {judge: {type: NAME, ...}}``. A judge that runs code builds its
    sandbox through ``context.build_sandbox()``.
    """


@hookspec
def register_environments(register: Register) -> None:
    """Registers environments: factories returning a
    :class:`~rlax_core.contracts.Environment` (what answers a model's turns).

    Called once per plugin when the plugin manager is built. The run config selects one
    with ``environment: {type: NAME, ...}`` (default: ``single_turn``). An environment
    with tools builds them through ``context.build_tool(config)``.
    """


@hookspec
def register_tools(register: Register) -> None:
    """Registers tools: factories returning a :class:`~rlax_core.contracts.Tool`.

    Called once per plugin when the plugin manager is built. A tool environment's config
    lists them: ``environment: {type: tools, tools: [{type: NAME, ...}]}``. A tool that
    runs code builds its sandbox through ``context.build_sandbox()``.
    """


@hookspec
def register_prompt_sources(register: Register) -> None:
    """Registers prompt sources: factories returning a
    :class:`~rlax_core.contracts.PromptSource` (a dataset's examples, made rather than
    read from a file).

    Called once per plugin when the plugin manager is built. A dataset of the run config
    names one with ``data: {train: [{source: {type: NAME, ...}}]}``.
    """


@hookspec
def register_launchers(register: Register) -> None:
    """Registers launchers: factories returning a :class:`~rlax_core.contracts.Launcher`.

    Called once per plugin when the plugin manager is built. The run config selects one
    with ``launcher: {type: NAME, ...}``.
    """


PLUGIN_KINDS: dict[str, str] = {
    kind: hook.__name__
    for kind, hook in (
        ("transport", register_transports),
        ("transport_server", register_transport_servers),
        ("sandbox", register_sandboxes),
        ("judge", register_judges),
        ("environment", register_environments),
        ("tool", register_tools),
        ("prompt_source", register_prompt_sources),
        ("launcher", register_launchers),
    )
}
"""Each kind of plugin → the name of the hook that registers it (the registry's kinds)."""
