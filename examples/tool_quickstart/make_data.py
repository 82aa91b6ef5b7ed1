"""Writes the tool quickstart's data and tokenizer (committed; rerun to regenerate them).

    uv run python examples/tool_quickstart/make_data.py

The task: add two four-digit numbers, e.g. ``"4731+6958"`` → ``"11689"`` (every sum has
five digits, so the answer sits at a fixed distance from the tool's). A small model
cannot add in its head, but it can call the ``calculator`` tool and copy its result:
3,000 sums train, 200 others are held out. Each row's problem carries the expression
(what the warm start's demonstration passes to the tool) and the answer (what the math
judge checks). The tokenizer is Qwen-style byte-level BPE whose merges are learned from
the conversations themselves, so the fixed JSON of a call is a few tokens, not a
hundred. Its chat template is Qwen2.5's with a one-line tool list (``Tools:
calculator``) and no default system prompt: the same turns, calls and responses, but a
prompt of 20 tokens rather than 300, so that two CPU cores learn the task in minutes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import jinja2

from rlax_core.contracts import Message
from rlax_core.environments import Calculator
from rlax_core.environments.chat import reply_text
from rlax_core.models.tokenizer_build import (
    QWEN_CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    build_qwen_tokenizer,
)

HERE = Path(__file__).resolve().parent
CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\nTools: ' }}"
    "{{- tools | map(attribute='function') | map(attribute='name') | join(', ') }}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    + QWEN_CHAT_TEMPLATE[QWEN_CHAT_TEMPLATE.index("{%- for message in messages %}") :]
)
TRAIN, HELD_OUT = 3000, 200
MERGES = 253  # 512 ids in all: the tiny preset's vocabulary
CALL = (
    '<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}'
    "\n</tool_call>"
)


def main() -> None:
    rng = random.Random(0)
    pairs = set()
    while len(pairs) < TRAIN + HELD_OUT:
        a = rng.randint(1000, 9999)
        pairs.add((a, rng.randint(10000 - a, 9999)))
    pairs = sorted(pairs)
    rng.shuffle(pairs)
    rows = [_row(a, b) for a, b in pairs]
    (HERE / "data").mkdir(exist_ok=True)
    _write("eval.jsonl", rows[:HELD_OUT])
    _write("train.jsonl", rows[HELD_OUT:])
    build_qwen_tokenizer(_corpus(rows[HELD_OUT:]), vocab_size=256 + len(SPECIAL_TOKENS) + MERGES,
                         path=HERE / "tokenizer", chat_template=CHAT_TEMPLATE)  # fmt: skip


def _row(a: int, b: int) -> dict:
    expression = f"{a}+{b}"
    problem = {"kind": "math", "answer": str(a + b), "expression": expression}
    return {"id": expression, "question": expression, "problem": problem}


def _corpus(rows: list[dict]) -> list[str]:
    """The text of whole conversations, as a rollout renders them."""
    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    tools = [Calculator().schema()]
    texts = []
    for row in rows[:500]:
        problem = row["problem"]
        prompt = template.render(messages=[{"role": "user", "content": row["question"]}],
                                 tools=tools, add_generation_prompt=True)  # fmt: skip
        reply = reply_text((Message(role="tool", content=problem["answer"]),), turn_closed=False)
        texts.append(prompt + CALL.format(**problem) + reply + problem["answer"])
    return texts


def _write(name: str, rows: list[dict]) -> None:
    with open(HERE / "data" / name, "w") as out:
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
