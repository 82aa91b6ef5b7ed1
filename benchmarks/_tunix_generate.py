"""Times Tunix's sampler on a checkpoint, in the side venv from scripts/lib/tunix-venv.sh.

    python -m benchmarks._tunix_generate CHECKPOINT JOB.json OUT.json  # from the repository root

The checkpoint is loaded with ``tunix.models.qwen2.params.create_model_from_safe_tensors``;
prompts are token ids, passed through a tokenizer that reads ids written as text.
Greedy decoding with no reachable stop token, like the other engines of the suite.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
from tunix.generate import sampler as sampler_lib
from tunix.models.qwen2 import params as params_lib

from benchmarks._tunix_model import model_config


class IdTokenizer:
    """Prompts are space-separated token ids; no BOS, pad 0."""

    def encode(self, text: str, **kwargs) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids, **kwargs) -> str:
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self) -> int:
        return 0  # falsy: Tunix then prepends nothing

    def eos_id(self) -> int:
        return -1

    def pad_id(self) -> int:
        return 0


def main() -> None:
    checkpoint, job_path, out_path = map(Path, sys.argv[1:4])
    job = json.loads(job_path.read_text())
    config = model_config(checkpoint)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    model = params_lib.create_model_from_safe_tensors(str(checkpoint), config, mesh)
    prompt_len, new_tokens = job["prompt_len"], job["new_tokens"]
    cache = sampler_lib.CacheConfig(
        cache_size=prompt_len + new_tokens + 8, num_layers=config.num_layers,
        num_kv_heads=config.num_kv_heads, head_dim=config.head_dim,
    )  # fmt: skip
    sampler = sampler_lib.Sampler(model, IdTokenizer(), cache)
    rng = np.random.default_rng(0)
    results = []
    for batch in job["batches"]:
        prompts = [
            " ".join(map(str, row))
            for row in rng.integers(1, config.vocab_size, (batch, prompt_len))
        ]

        def generate(steps: int, prompts: list[str] = prompts) -> float:
            start = time.perf_counter()
            out = sampler(prompts, max_generation_steps=steps, max_prompt_length=prompt_len,
                          eos_tokens=[-1], temperature=0.0)  # fmt: skip
            np.asarray(out.tokens[0])
            return time.perf_counter() - start

        generate(1)  # compile
        generate(new_tokens)
        prefill_s = float(np.median([generate(1) for _ in range(3)]))
        total_s = float(np.median([generate(new_tokens) for _ in range(3)]))
        results.append({"batch": batch, "prefill_s": prefill_s, "total_s": total_s})
    out_path.write_text(json.dumps({"jax": jax.__version__, "results": results}))


if __name__ == "__main__":
    main()
