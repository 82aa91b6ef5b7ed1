"""The plugin that ships with rlax-core: the embedded defaults."""

from __future__ import annotations

from rlax_core.environments import (
    Calculator,
    CalculatorConfig,
    SingleTurnConfig,
    SingleTurnEnvironment,
    ToolEnvironment,
    ToolEnvironmentConfig,
)
from rlax_core.hookspecs import Register, hookimpl
from rlax_core.plugins.registry import BuildContext
from rlax_core.transport.inproc import InProcTransport, InProcTransportConfig


def make_inproc_transport(config: InProcTransportConfig, context: BuildContext) -> InProcTransport:
    """Builds the in-process transport (one shared store and queue set per call)."""
    return InProcTransport(config)


@hookimpl
def register_transports(register: Register) -> None:
    """Registers the ``inproc`` transport."""
    register("inproc", make_inproc_transport, InProcTransportConfig)


def make_single_turn(config: SingleTurnConfig, context: BuildContext) -> SingleTurnEnvironment:
    """One prompt, one completion, judged (the default environment)."""
    return SingleTurnEnvironment()


def make_tool_environment(config: ToolEnvironmentConfig, context: BuildContext) -> ToolEnvironment:
    """The tool environment, with each of its tools built from its settings."""
    tools = [context.build_tool(spec) for spec in config.tools]
    return ToolEnvironment(tools, max_calls_per_turn=config.max_calls_per_turn)


def make_calculator(config: CalculatorConfig, context: BuildContext) -> Calculator:
    return Calculator(max_digits=config.max_digits)


@hookimpl
def register_environments(register: Register) -> None:
    """Registers the ``single_turn`` and ``tools`` environments."""
    register("single_turn", make_single_turn, SingleTurnConfig)
    register("tools", make_tool_environment, ToolEnvironmentConfig)


@hookimpl
def register_tools(register: Register) -> None:
    """Registers the ``calculator`` tool."""
    register("calculator", make_calculator, CalculatorConfig)
