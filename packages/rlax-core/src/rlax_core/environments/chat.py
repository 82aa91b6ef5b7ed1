"""An environment's messages as the text appended after a model turn, in ChatML.

Qwen's chat template renders a conversation as ``<|im_start|>ROLE\\n…<|im_end|>\\n``
turns; tool results go in one user turn of ``\\n<tool_response>\\n…\\n</tool_response>``
blocks. :func:`reply_text` writes exactly what the template writes between the end of a
model turn and the start of the next, so a rollout's tokens are the conversation's as
the template renders it, while the model's own turns are never re-tokenized.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlax_core.contracts.environment import Message

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def reply_text(messages: Sequence[Message], *, turn_closed: bool) -> str:
    """The text to append after a model turn: its end marker if the model did not write
    it (``turn_closed`` False), each message as Qwen's template renders it, then the
    header of the model's next turn."""
    parts = ["" if turn_closed else IM_END, "\n"]
    for i, message in enumerate(messages):
        if message.role == "user":
            parts.append(f"{IM_START}user\n{message.content}{IM_END}\n")
            continue
        if i == 0 or messages[i - 1].role != "tool":
            parts.append(f"{IM_START}user")
        parts.append(f"\n<tool_response>\n{message.content}\n</tool_response>")
        if i + 1 == len(messages) or messages[i + 1].role != "tool":
            parts.append(f"{IM_END}\n")
    parts.append(f"{IM_START}assistant\n")
    return "".join(parts)
