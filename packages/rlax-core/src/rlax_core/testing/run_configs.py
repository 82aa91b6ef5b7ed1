"""The short run the RL tests start from: the quickstart's task on a one-layer model.

Tests change what they test (staleness, transport, steps) on top of this base, so a
run test reads as what differs from every other one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def small_run_config(
    quickstart: Path, *, name: str, seed: int, evaluate: bool = True, num_kv_heads: int = 1
) -> dict[str, Any]:
    """A run config (as a dict) on the quickstart's data and tokenizer, a few seconds a step.

    Args:
        quickstart: the folder examples/quickstart (its tokenizer and data).
        name, seed: the run's name and seed.
        evaluate: include the held-out eval set.
        num_kv_heads: key/value heads of the two-head model (1 or 2).
    """
    dataset = {"prompt_template": "{question}", "answer_field": "answer", "id_field": "id"}
    train = {"path": str(quickstart / "data" / "train.jsonl"), **dataset}
    data: dict[str, Any] = {"train": [train]}
    if evaluate:
        data["eval"] = {"path": str(quickstart / "data" / "eval.jsonl"), **dataset}
    return {
        "run": {"name": name, "seed": seed},
        "model": {
            "preset": "tiny",
            "overrides": {
                "num_layers": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_heads": 2,
                "num_kv_heads": num_kv_heads,
            },
            "tokenizer": str(quickstart / "tokenizer"),
        },
        "data": data,
        "rollout": {
            "prompts_per_step": 4,
            "samples_per_prompt": 4,
            "max_new_tokens": 5,
            "groups_per_batch": 4,
        },
        "verifier": {"judge": {"type": "math"}},
    }
