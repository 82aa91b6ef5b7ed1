"""Tool calls in Qwen's format, read from a model turn.

The model writes each call as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``
(what Qwen's chat template teaches it). A call that cannot be read — broken JSON, no
name, arguments that are not an object, an unclosed block — is kept as an error for the
model to read, never raised.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it: ``name`` and ``arguments``, or ``error`` (what
    was wrong with it, for the model)."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_tool_calls(turn: str) -> list[ToolCall]:
    """Every ``<tool_call>`` block of a turn, in order (none: the turn calls no tool)."""
    calls = []
    for match in _BLOCK.finditer(turn):
        body = match.group(1).strip()
        if not match.group(0).endswith(CLOSE):
            calls.append(ToolCall(error=f"the tool call is not closed with {CLOSE}"))
            continue
        calls.append(_parse_one(body))
    return calls


def _parse_one(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall(error=f"the tool call is not valid JSON ({exc.msg} at {exc.pos})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(error='a tool call is a JSON object {"name": ..., "arguments": {...}}')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        return ToolCall(name=call["name"], error="the tool call's arguments must be an object")
    return ToolCall(name=call["name"], arguments=arguments)
