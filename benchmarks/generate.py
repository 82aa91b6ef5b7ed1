"""Generation throughput of the KV-cache sampler beside transformers, a no-cache JAX loop and Tunix.

For each model size (``tiny`` and a ~50M-parameter Qwen2) one random checkpoint is
written, and every engine generates from that same checkpoint in this run:

* rlax — :class:`rlax_core.generate.Sampler` (jitted prefill + ``while_loop`` decode).
* transformers — ``model.generate`` on torch CPU (side venv, scripts/lib/torch-venv.sh).
* naive JAX — the same model jitted, recomputing the whole sequence for every new token.
* Tunix — ``tunix.generate.sampler.Sampler`` (side venv with google-tunix, if it installs).

Prefill tokens/s = batch × prompt length / time to the first token; decode tokens/s =
batch × (new tokens − 1) / the time the rest took. Greedy decoding, no stop tokens.
Per batch size, the baselines run between two timings of rlax whose mean is reported,
so load on a shared machine falls on both sides of each ratio alike. At batch 16 each
engine is also set beside two ceilings of this machine, measured in the same run: its
prefill compute (GFLOP/s) beside the fp32 matrix-product rate, and the rate its decode
steps read the weights (each step reads every matrix once) beside the same matrices
through XLA's matrix products at M = 16 alone; those products are in turn set beside a
plain XLA sum of the same arrays, the memory's read rate.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks import _hf_reference, side_engine, side_python
from rlax_core.bench import Bench
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import Qwen, QwenConfig, init_model, load_pretrained, save_pretrained

# Tunix is installed only in its side venv, so this interpreter cannot import the module:
# it is named, and run there.
TUNIX_MODULE = "benchmarks._tunix_generate"

CONFIGS = {
    "tiny": QwenConfig.tiny(),
    "50M": QwenConfig.tiny(
        vocab_size=32768, hidden_size=512, intermediate_size=1536, num_layers=10,
        num_heads=8, num_kv_heads=4, head_dim=64, max_position_embeddings=4096,
    ),
}  # fmt: skip


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rlax_times(
    model: Qwen, prompts: list[list[int]], new_tokens: int, repeats: int
) -> tuple[float, float]:
    sampler = Sampler(model)
    first = SamplingParams(max_new_tokens=1, temperature=0.0)
    full = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    sampler.generate(prompts, first, seed=0)  # compile both shapes before timing
    sampler.generate(prompts, full, seed=0)
    return (
        _median_time(lambda: sampler.generate(prompts, first, seed=0), repeats),
        _median_time(lambda: sampler.generate(prompts, full, seed=0), repeats),
    )


def _naive(
    model: Qwen, prompts: list[list[int]], new_tokens: int, repeats: int
) -> tuple[float, float]:
    """No KV cache: every new token re-runs the model over the whole (padded) sequence.

    Each step costs the same (the padded width is fixed), so the decode rate is measured
    over a few steps and scaled to ``new_tokens``: the full run would take hours at the
    larger sizes.
    """
    graphdef, state = nnx.split(model)
    prompt_len, width = len(prompts[0]), len(prompts[0]) + new_tokens
    measured = min(new_tokens, 4)

    @jax.jit
    def step(state, tokens, valid, index):
        logits = nnx.merge(graphdef, state)(tokens, valid).logits
        token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, index - 1, 1, False), axis=-1)
        return tokens.at[:, index].set(token), valid.at[:, index].set(True)

    def generate(n: int) -> None:
        tokens = np.zeros((len(prompts), width), np.int32)
        tokens[:, :prompt_len] = prompts
        valid = np.zeros((len(prompts), width), bool)
        valid[:, :prompt_len] = True
        tokens, valid = jnp.asarray(tokens), jnp.asarray(valid)
        for i in range(n):
            tokens, valid = step(state, tokens, valid, prompt_len + i)
        tokens.block_until_ready()

    generate(1)
    first = _median_time(lambda: generate(1), repeats)
    per_step = (_median_time(lambda: generate(measured), repeats) - first) / max(measured - 1, 1)
    return first, first + per_step * (new_tokens - 1)


def _matmul_peak(size: int = 2048, repeats: int = 5) -> float:
    """This machine's fp32 matrix-product rate (FLOP/s): the best of XLA and NumPy.

    A compute-bound prefill cannot beat it, so it bounds any engine's prefill rate.
    """
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), np.float32) for _ in range(2))
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    product = jax.jit(jnp.matmul)
    product(ja, jb).block_until_ready()
    xla = _median_time(lambda: product(ja, jb).block_until_ready(), repeats)
    numpy = _median_time(lambda: a @ b, repeats)
    return 2 * size**3 / min(xla, numpy)


def _prefill_flops_per_token(config: QwenConfig, prompt_len: int) -> float:
    """Multiply-adds ×2 of one prompt token: the projections and MLP of every layer, and
    attention over (on average) half the prompt; the vocabulary projection runs only for
    the last token, so it is left out."""
    c = config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    projections = c.hidden_size * (2 * q + 2 * kv) + 3 * c.hidden_size * c.intermediate_size
    attention = 2 * q * prompt_len / 2
    return 2.0 * c.num_layers * (projections + attention)


def _record_peak(bench: Bench, label: str, config: QwenConfig, rates: dict[str, float],
                 prompt_len: int) -> None:  # fmt: skip
    """Each engine's prefill compute as a fraction of the machine's matmul peak."""
    peak = _matmul_peak()
    flops = _prefill_flops_per_token(config, prompt_len)
    for engine, tokens_per_s in rates.items():
        bench.record(f"{label} prefill compute vs this machine's fp32 matmul peak",
                     subject=tokens_per_s * flops / 1e9, baseline=peak / 1e9, unit="GFLOP/s",
                     higher_is_better=True, subject_label=engine,
                     baseline_label="2048² fp32 matmul, best of XLA and NumPy")  # fmt: skip


def _decode_matrices(model: Qwen) -> list[jax.Array]:
    """The matrices a decode step reads whole: every projection and the vocabulary one
    (the embedding table itself when tied; an untied table is only gathered from)."""
    flat = [(path, v.get_value()) for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    untied = any(path[0] == "lm_head" for path, _ in flat)
    return [a for path, a in flat if a.ndim == 2 and not (untied and "embed_tokens" in path)]


def _weight_read_rates(matrices: list[jax.Array], batch: int) -> tuple[float, float]:
    """This machine's rates (bytes/s) for reading these weights once: through XLA's
    matrix products at M = ``batch`` with nothing else, and through a plain XLA sum.

    The first is what a decode step's products alone would reach, the floor of any XLA
    engine's step; the second is the memory's own read rate.
    """
    inputs = {a.shape[1]: jnp.ones((batch, a.shape[1]), a.dtype) for a in matrices}

    @jax.jit
    def products(inputs: dict[int, jax.Array], matrices: list[jax.Array]) -> jax.Array:
        carried = jnp.zeros(())
        for w in matrices:  # each product needs the one before: one at a time
            carried = carried + ((inputs[w.shape[1]] + carried * 1e-12) @ w.T).sum() * 1e-12
        return carried

    @jax.jit
    def sums(matrices: list[jax.Array]) -> jax.Array:
        return sum(w.sum() for w in matrices)

    products(inputs, matrices).block_until_ready()
    sums(matrices).block_until_ready()
    nbytes = sum(a.nbytes for a in matrices)
    product_s = _median_time(lambda: products(inputs, matrices).block_until_ready(), 5)
    sum_s = _median_time(lambda: sums(matrices).block_until_ready(), 5)
    return nbytes / product_s, nbytes / sum_s


def record_weight_reads(bench: Bench, label: str, model: Qwen, batch: int,
                         decode_tokens_per_s: dict[str, float]) -> None:  # fmt: skip
    """Each engine's decode as the rate its steps read the weights, beside the ceilings."""
    matrices = _decode_matrices(model)
    step_bytes = sum(a.nbytes for a in matrices)
    products, memory = _weight_read_rates(matrices, batch)
    for engine, tokens_per_s in decode_tokens_per_s.items():
        bench.record(f"{label} decode weight reads vs the same products alone",
                     subject=tokens_per_s / batch * step_bytes / 1e9, baseline=products / 1e9,
                     unit="GB/s", higher_is_better=True, subject_label=engine,
                     baseline_label=f"its matrix products alone, XLA, M={batch}")  # fmt: skip
    bench.record(f"{label} decode matrix products vs this machine's memory read rate",
                 subject=products / 1e9, baseline=memory / 1e9, unit="GB/s",
                 higher_is_better=True, subject_label=f"XLA matrix products, M={batch}",
                 baseline_label="XLA sum of the same weights")  # fmt: skip


def _side_times(side: dict) -> tuple[float, float]:
    """(seconds to the first token, seconds in all) from a side engine's answer."""
    return side["results"][0]["prefill_s"], side["results"][0]["total_s"]


def token_rates(times: tuple[float, float], batch: int, prompt_len: int,
           new_tokens: int) -> tuple[float, float]:  # fmt: skip
    """(prefill, decode) tokens/s from (seconds to the first token, seconds in all)."""
    prefill_s, total_s = times
    return batch * prompt_len / prefill_s, batch * (new_tokens - 1) / max(total_s - prefill_s, 1e-9)


def _record(bench: Bench, label: str, ours: tuple[float, float], theirs: tuple[float, float],
            baseline: str, batch: int, prompt_len: int, new_tokens: int) -> None:  # fmt: skip
    o_pre, o_dec = token_rates(ours, batch, prompt_len, new_tokens)
    t_pre, t_dec = token_rates(theirs, batch, prompt_len, new_tokens)
    bench.record(f"{label} prefill", subject=o_pre, baseline=t_pre, unit="tokens/s",
                 higher_is_better=True, baseline_label=baseline)  # fmt: skip
    bench.record(f"{label} decode", subject=o_dec, baseline=t_dec, unit="tokens/s",
                 higher_is_better=True, baseline_label=baseline)  # fmt: skip


def run(bench: Bench) -> None:
    """Runs the generate suite."""
    quick = bench.quick
    configs = {"tiny": CONFIGS["tiny"]} if quick else CONFIGS
    batches = (1, 4) if quick else (1, 16, 64)
    prompt_len, new_tokens, repeats = (16, 8, 1) if quick else (64, 64, 3)
    torch_python = None if quick else side_python("torch-venv.sh")
    tunix_python = None if quick else side_python("tunix-venv.sh")
    bench.notes.update(prompt_len=prompt_len, new_tokens=new_tokens, jax=jax.__version__)
    for name, config in configs.items():
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = Path(tmp) / name
            save_pretrained(init_model(config, seed=0), checkpoint)
            model = load_pretrained(checkpoint)
            bench.notes[f"{name}_params"] = config.num_params()
            rng = np.random.default_rng(0)
            for batch in batches:
                prompts = rng.integers(0, config.vocab_size, (batch, prompt_len)).tolist()
                # The baselines run between two timings of ours, averaged, so a busy
                # moment of a shared machine lands on both sides alike.
                job = {"batches": [batch], "prompt_len": prompt_len, "new_tokens": new_tokens}
                before = rlax_times(model, prompts, new_tokens, repeats)
                hf = tunix = None
                if torch_python is not None:
                    hf = side_engine(torch_python, _hf_reference, ["generate"], checkpoint, job)
                if tunix_python is not None:
                    tunix = side_engine(tunix_python, TUNIX_MODULE, [], checkpoint, job)
                naive = _naive(model, prompts, new_tokens, repeats)
                after = rlax_times(model, prompts, new_tokens, repeats)
                ours = ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2)
                label = f"{name} batch {batch}"
                _record(bench, label, ours, naive, "naive JAX, no KV cache", batch, prompt_len,
                        new_tokens)  # fmt: skip
                for side, baseline in ((hf, "transformers generate (torch CPU)"),
                                       (tunix, "Tunix sampler")):  # fmt: skip
                    if side is not None:
                        _record(bench, label, ours, _side_times(side), baseline, batch, prompt_len,
                                new_tokens)  # fmt: skip
                if batch == 16:  # the batch the target is set at
                    engines = {"rlax": ours}
                    if hf is not None:
                        engines["transformers"] = _side_times(hf)
                    rates = {e: token_rates(t, batch, prompt_len, new_tokens)
                             for e, t in engines.items()}  # fmt: skip
                    _record_peak(bench, label, config, {e: r[0] for e, r in rates.items()},
                                 prompt_len)  # fmt: skip
                    record_weight_reads(bench, label, model, batch,
                                         {e: r[1] for e, r in rates.items()})  # fmt: skip
