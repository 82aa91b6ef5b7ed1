"""Reference outputs from Hugging Face transformers, run in the side torch venv.

Not a test module and not a suite: the parity tests (packages/rlax-core/tests/models,
through the ``hf_reference`` fixture of rlax-core's conftest) and the generate suite run
it with the python of .cache/torch-venv (scripts/lib/torch-venv.sh), because torch stays
out of the workspace lock. From the repository root:

    python -m benchmarks._hf_reference build OUT_DIR  # tiny random checkpoints, outputs
    python -m benchmarks._hf_reference logits CKPT TOKENS.npy OUT.npy
    python -m benchmarks._hf_reference tokenize TOK_DIR STRINGS.json OUT.json
    python -m benchmarks._hf_reference generate CKPT JOB.json OUT.json  # generate suite
    python -m benchmarks._hf_reference rollout CKPT JOB.json OUT.json  # rollout suite

It lives in the ``benchmarks`` package rather than in ``rlax_core.testing``: the torch
venv has no RLAX installed, so ``rlax_core.testing`` (whose package also imports pytest)
cannot be imported there, while the ``benchmarks`` package's ``__init__`` imports only
the standard library, so ``python -m`` runs this module there; and the published
rlax-core should not carry a torch-only module that only this repository's tests and
benchmarks use. The tests and the generate suite both import it normally (``from
benchmarks import _hf_reference``) and start it with :func:`benchmarks.run_module`, a
process boundary. torch and transformers are imported inside the functions that use
them, so the workspace's python, which has neither, can import this module too.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import transformers

VOCAB = 384


def _config(model_type: str, hidden: int, heads: int, kv: int, tied: bool, theta: float, **more):
    fields = dict(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
                  tie_word_embeddings=tied, rope_theta=theta, **more)  # fmt: skip
    return model_type, fields


# GQA ratios 1, 2, 4, 5; odd head counts; tied and untied; rope theta 1e6 and 1e4.
CONFIGS = {
    "qwen2_tied_gqa2": _config("qwen2", 64, 4, 2, tied=True, theta=1e6),
    "qwen2_untied_mha": _config("qwen2", 64, 4, 4, tied=False, theta=1e4),
    "qwen2_odd_heads": _config("qwen2", 56, 7, 7, tied=False, theta=1e6, num_hidden_layers=3),
    "qwen3_gqa4": _config("qwen3", 64, 8, 2, tied=False, theta=1e6, head_dim=16),
    "qwen3_odd_gqa5": _config("qwen3", 48, 5, 1, tied=True, theta=1e6, head_dim=12),
}


def make_model(model_type: str, overrides: dict, seed: int) -> transformers.PreTrainedModel:
    import torch
    import transformers

    config_cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[model_type]
    fields = dict(vocab_size=VOCAB, intermediate_size=96, num_hidden_layers=2,
                  max_position_embeddings=512, rms_norm_eps=1e-6)  # fmt: skip
    config = config_cls(**{**fields, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():  # HF initialises biases to 0 and norms to 1: randomise them all
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            elif "embed" in name:
                param.normal_(0.0, 0.5)
            else:
                param.normal_(0.0, 0.15)
    return model.eval()


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, size=(2, 11)).astype(np.int32)
    # Left padding: the second sequence has 7 real tokens.
    valid = np.ones_like(tokens, dtype=bool)
    valid[1, :4] = False
    padded = np.where(valid, tokens, 0).astype(np.int32)
    positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)
    return {"tokens": tokens, "padded": padded, "valid": valid, "positions": positions}


def forward(model, tokens: np.ndarray, valid=None, positions=None) -> tuple:
    import torch

    kwargs = {"output_hidden_states": True}
    if valid is not None:
        kwargs["attention_mask"] = torch.tensor(valid.astype(np.int64))
        kwargs["position_ids"] = torch.tensor(positions.astype(np.int64))
    with torch.no_grad():
        out = model(torch.tensor(tokens.astype(np.int64)), **kwargs)
    hidden = np.stack([h.float().numpy() for h in out.hidden_states])
    return out.logits.float().numpy(), hidden


def build(out_dir: Path) -> None:
    import torch
    import transformers

    data = inputs()
    for i, (name, (model_type, overrides)) in enumerate(CONFIGS.items()):
        model = make_model(model_type, overrides, seed=i)
        model.save_pretrained(out_dir / name)
        logits, hidden = forward(model, data["tokens"])
        padded_logits, _ = forward(model, data["padded"], data["valid"], data["positions"])
        bf16_logits, _ = forward(model.to(torch.bfloat16), data["tokens"])
        np.savez(out_dir / name / "reference.npz", logits=logits, hidden=hidden,
                 padded_logits=padded_logits, bf16_logits=bf16_logits, **data)  # fmt: skip
    # One checkpoint sharded into several files with an index.
    model = make_model(*CONFIGS["qwen2_untied_mha"], seed=1)
    model.save_pretrained(out_dir / "qwen2_untied_mha_sharded", max_shard_size="40KB")
    (out_dir / "COMPLETE").write_text(transformers.__version__)


def logits(checkpoint: Path, tokens_path: Path, out_path: Path) -> None:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, attn_implementation="eager"
    )
    out, _ = forward(model.eval().float(), np.load(tokens_path))
    np.save(out_path, out)


def tokenize(tok_dir: Path, strings_path: Path, out_path: Path) -> None:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tok_dir)
    strings = json.loads(strings_path.read_text())
    result = {
        "encode": [tokenizer.encode(s, add_special_tokens=False) for s in strings],
        "encode_default": [tokenizer(s)["input_ids"] for s in strings],
        "decode": [
            tokenizer.decode(tokenizer.encode(s, add_special_tokens=False)) for s in strings
        ],
        "chat": tokenizer.apply_chat_template(
            [
                {"role": "user", "content": strings[0]},
                {"role": "assistant", "content": strings[1]},
                {"role": "user", "content": strings[2]},
            ],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        ),
        "chat_system": tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            add_generation_prompt=False,
            tokenize=False,
        ),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    out_path.write_text(json.dumps(result))


def generate(checkpoint: Path, job_path: Path, out_path: Path) -> None:
    """Times transformers' generate: prefill (1 new token) and decode tokens/s."""
    import torch
    import transformers

    job = json.loads(job_path.read_text())
    torch.set_num_threads(job.get("threads", torch.get_num_threads()))
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    rng = np.random.default_rng(0)
    results = []
    for batch in job["batches"]:
        prompt = torch.tensor(rng.integers(0, model.config.vocab_size, (batch, job["prompt_len"])))
        kwargs = dict(do_sample=False, pad_token_id=0, eos_token_id=None, use_cache=True)
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
            start = time.perf_counter()
            model.generate(prompt, max_new_tokens=1, min_new_tokens=1, **kwargs)
            prefill_s = time.perf_counter() - start
            start = time.perf_counter()
            n = job["new_tokens"]
            model.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kwargs)
            total_s = time.perf_counter() - start
        results.append({"batch": batch, "prefill_s": prefill_s, "total_s": total_s})
    out_path.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "results": results}))


def rollout(checkpoint: Path, job_path: Path, out_path: Path) -> None:
    """Times transformers' generate over a rollout job in static batches (the rollout
    suite's baseline): ``{"prompts", "samples", "budgets", "batch", "temperature"}``,
    each batch of ``batch`` completions (``batch // samples`` prompts, each repeated)
    sampled until its longest budget, EOS ignored; writes the seconds it took."""
    import torch
    import transformers

    job = json.loads(job_path.read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    samples, budgets = job["samples"], job["budgets"]
    groups = job["batch"] // samples
    kwargs = dict(do_sample=True, temperature=job["temperature"], top_k=0, top_p=1.0,
                  pad_token_id=0, eos_token_id=None, use_cache=True)  # fmt: skip
    batches = []
    for start in range(0, len(job["prompts"]), groups):
        prompts = torch.tensor(job["prompts"][start : start + groups]).repeat_interleave(samples, 0)
        longest = max(budgets[start * samples : (start + groups) * samples])
        batches.append((prompts, longest))
    torch.manual_seed(0)
    with torch.no_grad():
        model.generate(batches[0][0], max_new_tokens=2, min_new_tokens=2, **kwargs)  # warm-up
        started = time.perf_counter()
        for prompts, longest in batches:
            model.generate(prompts, max_new_tokens=longest, min_new_tokens=longest, **kwargs)
        seconds = time.perf_counter() - started
    out_path.write_text(json.dumps({"seconds": seconds, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands = {"build": build, "logits": logits, "tokenize": tokenize, "generate": generate,
                "rollout": rollout}  # fmt: skip
    commands[command](*map(Path, args))
