"""Taking the program out of a model's completion: its last fenced code block.

Rules: the last *closed* fenced block wins; an unclosed fence at the end counts as a
block running to the end of the text (a completion cut off by the token limit); a
completion without any fence is taken whole. Fences are three or more backticks or
tildes, optionally followed by a language tag, at the start of a line.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)


def extract_code(completion: str) -> str:
    """The code of a completion (see module docstring)."""
    blocks: list[str] = []
    opened: tuple[str, int] | None = None  # (fence, where the block's body starts)
    for match in _FENCE.finditer(completion):
        fence = match.group(1)
        if opened is None:
            opened = (fence, match.end() + 1)
        elif fence[0] == opened[0][0] and len(fence) >= len(opened[0]) and not match.group(2):
            blocks.append(completion[opened[1] : match.start()])
            opened = None
    if opened is not None:
        tail = completion[opened[1] :]
        if tail.strip():
            blocks.append(tail)
    if not blocks:
        return completion
    return blocks[-1].rstrip("\n") + "\n"
