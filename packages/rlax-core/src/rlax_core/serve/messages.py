"""OpenAI chat messages as RLAX reads them: normalised for the chat template, and a
model turn's ``<tool_call>`` blocks in OpenAI's ``tool_calls`` shape. Shared by the
policy's endpoint, a worker's episode endpoint and the prompt sources whose datasets hold
OpenAI messages; plain Python (no HTTP server needed)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from rlax_core.environments.tool_calls import parse_tool_calls


class BadRequestError(Exception):
    """A request OpenAI's API would refuse: answered 400 with OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def tool_calls_of(text: str) -> list[dict[str, Any]] | None:
    """The text's tool calls in OpenAI's shape; None if it has none or one is malformed
    (the text then stays content, as the model wrote it)."""
    calls = parse_tool_calls(text)
    if not calls or any(c.error for c in calls):
        return None
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls]  # fmt: skip


def template_message(message: Any) -> dict[str, Any]:
    """An OpenAI message as the chat template reads it: text content, and tool calls'
    arguments as objects."""
    if not isinstance(message, dict) or message.get("role") not in (
        "system",
        "user",
        "assistant",
        "tool",
    ):
        raise BadRequestError("each message is an object with a role of system, user, assistant "
                         "or tool", "messages")  # fmt: skip
    content = message.get("content")
    if isinstance(content, list):  # content parts: only text is understood
        if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
            raise BadRequestError("only text content parts are supported", "messages")
        content = "".join(p.get("text", "") for p in content)
    rendered: dict[str, Any] = {"role": message["role"], "content": content or ""}
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            function = dict(call.get("function") or {})
            if isinstance(function.get("arguments"), str):
                try:
                    function["arguments"] = json.loads(function["arguments"])
                except json.JSONDecodeError:
                    raise BadRequestError("a tool call's arguments are not valid JSON",
                                     "messages") from None  # fmt: skip
            calls.append({"type": "function", "function": function})
        rendered["tool_calls"] = calls
    return rendered
