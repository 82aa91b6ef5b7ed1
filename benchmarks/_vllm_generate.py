"""Times vLLM's CPU build on a rollout job, run in the side vLLM venv.

A baseline for the rollout benchmark, not a suite: it runs with the python of
.cache/vllm-venv (scripts/lib/vllm-venv.sh), because vLLM and its torch stay out of the
workspace lock. From the repository root:

    python -m benchmarks._vllm_generate CKPT JOB.json OUT.json

CKPT is a Hugging Face-format Qwen2 checkpoint (config.json and safetensors, as
``rlax_core.models.save_pretrained`` writes it) without a tokenizer: prompts go in and
completions come out as token ids. JOB.json holds ``{"prompts": [[id, ...], ...],
"samples": S, "budgets": [tokens per completion, prompt-major], "temperature": T,
"seed": N}`` and optionally ``"max_num_seqs"`` (default 256) and ``"enforce_eager"``
(default true: no torch.compile, whose inductor build needs a C++ compiler and takes
minutes on CPU, cached under ~/.cache/vllm). Every prompt is sampled S times, each
completion a request of its own with exactly its budget of new tokens (EOS ignored),
drawn from the engine's generator, seeded with ``seed`` (with a seed per request,
vLLM 0.32's CPU sampler stopped with "CPU Generator does not use offset" on the
workload of 64 prompts); one warm-up generate goes first, then a single ``LLM.generate``
over all the requests is timed. OUT.json gets ``{"seconds",
"useful_tokens", "vllm", "torch_threads", "max_num_seqs"}``: useful_tokens counts the
tokens vLLM returned, which must equal the budgets.

Environment: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache) defaults to 2 here instead of
vLLM's 4; ``VLLM_CPU_OMP_THREADS_BIND`` and ``VLLM_CPU_NUM_OF_RESERVED_CPU`` choose the
engine's cores (vLLM's defaults: all but one, which it keeps for its front end).
``VLLM_ALLOW_INSECURE_SERIALIZATION`` is set to 1 so that the worker process can be asked
for its torch thread count (a function sent by ``LLM.collective_rpc``).

Everything runs under ``if __name__ == "__main__"``: vLLM spawns its engine process,
which imports this module again. Only the standard library is imported at module level
(vLLM inside :func:`main`), like the ``benchmarks`` package itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BLOCK = 128
"""vLLM's CPU KV-cache block size: max_model_len is rounded up to a multiple of it
(within the model's max_position_embeddings)."""


def _worker_threads(worker: Any) -> int:
    """Runs in vLLM's worker process (by ``collective_rpc``): its torch thread count."""
    import torch

    return torch.get_num_threads()


def main(checkpoint: Path, job_path: Path, out_path: Path) -> None:
    job = json.loads(job_path.read_text())
    prompts: list[list[int]] = job["prompts"]
    samples: int = job["samples"]
    budgets: list[int] = job["budgets"]
    if len(budgets) != len(prompts) * samples or min(budgets) < 1:
        raise SystemExit(f"need {len(prompts)}x{samples} budgets >= 1, got {len(budgets)}")
    max_num_seqs = job.get("max_num_seqs", 256)
    longest = max(map(len, prompts)) + max(budgets)
    positions = json.loads((checkpoint / "config.json").read_text())["max_position_embeddings"]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    import vllm

    llm = vllm.LLM(
        model=str(checkpoint),
        skip_tokenizer_init=True,
        dtype="float32",
        gpu_memory_utilization=0.1,  # on CPU: the share of RAM it may reserve
        max_model_len=min(-(-longest // BLOCK) * BLOCK, max(longest, positions)),
        max_num_seqs=max_num_seqs,
        enforce_eager=job.get("enforce_eager", True),
        seed=job["seed"],
    )
    requests = [{"prompt_token_ids": p} for p in prompts for _ in range(samples)]
    params = [
        vllm.SamplingParams(max_tokens=budget, min_tokens=budget, ignore_eos=True,
                            temperature=job["temperature"])
        for budget in budgets
    ]  # fmt: skip
    warm = vllm.SamplingParams(max_tokens=4, min_tokens=4, ignore_eos=True)
    llm.generate(requests[:samples], warm, use_tqdm=False)
    start = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    counts = [len(out.outputs[0].token_ids) for out in outputs]
    wrong = [(i, n, b) for i, (n, b) in enumerate(zip(counts, budgets, strict=True)) if n != b]
    if wrong:
        raise SystemExit(f"vLLM returned other token counts than the budgets: {wrong[:10]}")
    result = {
        "seconds": seconds,
        "useful_tokens": sum(counts),
        "vllm": vllm.__version__,
        "torch_threads": llm.collective_rpc(_worker_threads)[0],
        "max_num_seqs": max_num_seqs,
    }
    out_path.write_text(json.dumps(result))


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:]))
