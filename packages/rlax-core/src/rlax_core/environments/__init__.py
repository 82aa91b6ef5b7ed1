"""Environments that ship with rlax-core: single-turn answers, tools, the built-in
calculator tool, and the base of environments that are OpenAI-client programs. The
contract is :mod:`rlax_core.contracts.environment`."""

from rlax_core.environments.calculator import Calculator, CalculatorConfig
from rlax_core.environments.chat import reply_text
from rlax_core.environments.client import ClientEnvironment, EnvironmentProtocolError, ListedTool
from rlax_core.environments.tool_calls import ToolCall, parse_tool_calls
from rlax_core.environments.tools import (
    SingleTurnConfig,
    SingleTurnEnvironment,
    ToolEnvironment,
    ToolEnvironmentConfig,
)

__all__ = [
    "Calculator",
    "CalculatorConfig",
    "ClientEnvironment",
    "EnvironmentProtocolError",
    "ListedTool",
    "SingleTurnConfig",
    "SingleTurnEnvironment",
    "ToolCall",
    "ToolEnvironment",
    "ToolEnvironmentConfig",
    "parse_tool_calls",
    "reply_text",
]
