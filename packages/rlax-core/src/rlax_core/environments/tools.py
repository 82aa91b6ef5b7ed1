"""The tool environment: the model calls tools until it answers without one.

Each model turn is read for ``<tool_call>`` blocks (:mod:`.tool_calls`). A turn with
none is the model's answer: the episode ends and the judge decides the reward on it. A
turn with calls gets one tool message per call, in order: the tool's result, or an
error the model can read — a malformed call, an unknown tool, arguments that do not
validate, a :class:`~rlax_core.contracts.ToolError`, even a tool's own crash — so one
bad call never ends the rollout. A :class:`~rlax_core.errors.RlaxError` (a sandbox that
cannot be reached) is no answer at all: it propagates, and the rollout ends unjudged.
Limits on turns, tokens and wall time are the worker's (``rollout.turns``), the same for
every environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from rlax_core.contracts.environment import Environment, EnvStep, Episode, Message, Tool, ToolError
from rlax_core.environments.tool_calls import ToolCall, parse_tool_calls
from rlax_core.errors import RlaxError


class ToolEnvironmentConfig(BaseModel):
    """Settings of the ``tools`` environment."""

    tools: list[dict[str, Any]] = Field(
        min_length=1,
        description="The tools offered, each {type: NAME, ...its settings} (see `rlax plugins` "
        "for the installed tools).",
    )
    max_calls_per_turn: int = Field(
        default=4, ge=1, description="Calls run per model turn; later ones get an error."
    )


class ToolEnvironment(Environment):
    """Offers ``tools``; see the module docstring."""

    def __init__(self, tools: Sequence[Tool], *, max_calls_per_turn: int = 4) -> None:
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools share a name: {names}")
        self.tools = tuple(tools)
        self._by_name = {tool.name: tool for tool in tools}
        self._max_calls = max_calls_per_turn

    def start(self, problem: Mapping[str, Any]) -> Episode:
        return _ToolEpisode(self)

    def answer(self, call: ToolCall) -> str:
        """A call's result, or the error the model reads instead."""
        if call.error is not None:
            return f"Error: {call.error}"
        tool = self._by_name.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._by_name))
            return f"Error: there is no tool named {call.name!r} (tools: {known})"
        try:
            arguments = tool.Arguments.model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return f"Error: wrong arguments for {call.name}: {problems}"
        try:
            return tool.call(arguments)
        except ToolError as exc:
            return f"Error: {exc}"
        except RlaxError:  # the infrastructure failed: nothing is known about the call
            raise
        except Exception as exc:  # the tool's own bug: the model reads it, the run goes on
            return f"Error: the tool {call.name} failed ({type(exc).__name__}: {exc})"

    def close(self) -> None:
        for tool in self.tools:
            tool.close()


class _ToolEpisode(Episode):
    def __init__(self, environment: ToolEnvironment) -> None:
        self._env = environment

    def step(self, turn: str) -> EnvStep:
        calls = parse_tool_calls(turn)
        if not calls:  # the model's answer
            return EnvStep(done=True)
        limit = self._env._max_calls
        results = [self._env.answer(call) for call in calls[:limit]]
        results += [f"Error: at most {limit} tool calls a turn"] * len(calls[limit:])
        return EnvStep(messages=tuple(Message(role="tool", content=r) for r in results))


class SingleTurnConfig(BaseModel):
    """The ``single_turn`` environment has no settings: one prompt, one answer, judged."""


class SingleTurnEnvironment(Environment):
    """One prompt, one completion, judged: the episodes end at the model's first turn."""

    multi_turn = False

    def start(self, problem: Mapping[str, Any]) -> Episode:
        return _Answered()


class _Answered(Episode):
    def step(self, turn: str) -> EnvStep:
        return EnvStep(done=True)
