"""Writes the quickstart's data and tokenizer (committed; rerun to regenerate them).

    uv run python examples/quickstart/make_data.py

The task: reverse a four-digit number, e.g. ``"4731>"`` → ``"1374"`` (digits 1-9, so no
leading zeros). 3,000 numbers train, 200 others are held out for evaluation: the
model must learn the rule, not the answers. The tokenizer is Qwen-style byte-level BPE
with no merges, so every character is one token.

The code example (``examples/code_quickstart.yaml``) asks for a program that prints
the reversed number, judged by running it in the local sandbox.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from rlax_core.models.tokenizer_build import SPECIAL_TOKENS, build_qwen_tokenizer

HERE = Path(__file__).resolve().parent
TRAIN, HELD_OUT = 3000, 200


def main() -> None:
    numbers = ["".join(d) for d in itertools.product("123456789", repeat=4)]
    random.Random(0).shuffle(numbers)
    splits = {"eval": numbers[:HELD_OUT], "train": numbers[HELD_OUT : HELD_OUT + TRAIN]}
    (HERE / "data").mkdir(exist_ok=True)
    for split, rows in splits.items():
        _write(f"{split}.jsonl", [{"id": n, "question": f"{n}>", "answer": n[::-1]} for n in rows])
        # The code task: fewer rows (each carries its test), same numbers.
        _write(f"code_{split}.jsonl", [_code_row(n) for n in rows[: len(rows) // 3]])
    # 256 byte symbols + the special tokens: no merges, one token per character.
    build_qwen_tokenizer(
        ["0123456789>"], vocab_size=256 + len(SPECIAL_TOKENS), path=HERE / "tokenizer"
    )


def _code_row(number: str) -> dict:
    test = {"type": "stdin_stdout", "cases": [{"input": "", "output": number[::-1]}]}
    problem = {"kind": "code", "language": "python", "tests": test, "time_limit_s": 2}
    return {"id": number, "question": f"print {number}>", "problem": problem}


def _write(name: str, rows: list[dict]) -> None:
    with open(HERE / "data" / name, "w") as out:
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
