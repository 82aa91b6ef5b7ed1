"""Real model sizes on one host: the 0.5B preset's memory, its flatness and its step split.

Each run is the embedded run of ``rlax train`` (trainer and one worker thread in one
process, the inproc transport) on the quickstart's task and tokenizer with the
``qwen2_5_0_5b`` preset, 2 prompts × 4 samples, k = 0, ``model.remat`` on, two rows per
micro-batch, no warm start, no evaluation, checkpoints every 2 steps. Full mode runs
fp32 and bf16 at 256 and 1,024 new tokens, 5 steps each; quick mode runs the one-layer
test model. Each run
is a process of its own, its resident memory sampled from outside every 0.25 s (a PNG
per run beside the results), and its metrics read from its ``metrics.jsonl``.
``RLAX_BENCH_SCALE_RUNS`` picks some of the full runs (``float32:1024,bfloat16:256``):
on a small machine each 1,024-token step takes minutes. ``trainer:float32:1024`` picks
the trainer alone on a batch of that run's shape (see ``benchmarks._scale_trainer``),
which full mode runs in fp32 at both lengths: its FLOP/s without hours of generation,
and one layer's attention by causal blocks beside the whole square.


* peak RSS ÷ parameter bytes, beside parameters + gradients + AdamW moments (4×);
* RSS after the last step ÷ RSS after step 3 (a leak grows it), beside 1;
* checkpoint wait per step after the first, beside the step's time;
* the worst bf16 log-probability gap between sampler and trainer, beside fp32's;
* the floor under that gap, named by what removes it: the worker's check (a batch of 2 ×
  4 samples at 256 new tokens, sampled and teacher-forced, in this process after the
  runs) with bf16 parameters and activations, beside fp32; and with bf16 parameters and
  fp32 activations (``model.activation_dtype: float32``), beside all-bf16;
* the training step's FLOP/s (XLA's cost analysis of the compiled micro-steps, remat's
  recomputation included, over ``time/train_s``), beside the machine's fp32
  matrix-product rate measured in this process between the runs (the 0.5B MLP's
  up-projection shape, 2,048 rows);
* the worker's decode at this size (8 rows, greedy, in this process after the runs) as
  the rate its steps read the weights, beside the same matrices' products at M = 8
  alone (see ``benchmarks.generate``);
* the time per step, split into generation (the trainer waiting for rollouts at
  k = 0), training, and the rest (publishing, bookkeeping), in the notes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import yaml

from benchmarks import _scale_trainer, generate
from rlax_core.bench import Bench
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import init_model
from rlax_core.models.qwen.config import QwenConfig
from rlax_core.models.qwen.sequence_attention import scored_slots
from rlax_core.rl.roles.rollout_groups import logprob_gaps
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
RESULTS = REPO / "bench-results"
PRESET = "qwen2_5_0_5b"
SAMPLE_S = 0.25


def _config(*, dtype: str, tokens: int, steps: int, quick: bool) -> dict[str, Any]:
    config = small_run_config(QUICKSTART, name=f"scale-{dtype}-{tokens}", seed=0, evaluate=False)
    if not quick:
        config["model"] = {"preset": PRESET, "tokenizer": str(QUICKSTART / "tokenizer")}
    config["model"] |= {"dtype": dtype, "remat": True}
    config["rollout"] |= {"prompts_per_step": 2, "samples_per_prompt": 4, "groups_per_batch": 2,
                          "max_new_tokens": tokens}  # fmt: skip
    config["staleness"] = {"max_staleness": 0}
    # Two 1,088-token rows per micro-batch: the step's activations are a row pair's,
    # and accumulating into the donated gradient sum costs no second gradient buffer.
    config["trainer"] = {"total_steps": steps, "learning_rate": 1e-6,
                         "micro_batch_tokens": 2 * (tokens + 64)}  # fmt: skip
    config["checkpoint"] = {"every_steps": 2}
    return config


def _sizes(config: dict[str, Any]) -> QwenConfig:
    """The model a run config describes."""
    model = config["model"]
    sizes = QwenConfig.preset(model["preset"]).replace(**model.get("overrides", {}))
    return sizes.replace(param_dtype=model["dtype"], dtype=model["dtype"],
                         remat=model.get("remat", False))  # fmt: skip


def _parameter_bytes(config: dict[str, Any]) -> int:
    sizes = _sizes(config)
    return sizes.num_params() * (2 if sizes.param_dtype == "bfloat16" else 4)


def _budget(config: dict[str, Any]) -> dict[str, int]:
    """What each part of a run holds while it is alive, in bytes, from the shapes (a
    prompt taken as 64 tokens). The KV cache lives while generating; activations and
    logits while training; the rest throughout.

    The worker's policy and the parameter store's version are the trainer's arrays
    themselves (one process, no copy), and the update writes the new parameters into
    the gradients' buffers, so the old version the store still holds costs nothing more.
    Activations are remat's: every layer's input for the micro-batch, and one layer's
    attention scores (fp32, the causal blocks' share of the square) and MLP
    intermediates in its backward pass.
    """
    sizes = _sizes(config)
    weight = 2 if sizes.param_dtype == "bfloat16" else 4
    act = 2 if sizes.dtype == "bfloat16" else 4
    rows = config["rollout"]["prompts_per_step"] * config["rollout"]["samples_per_prompt"]
    length = 64 + config["rollout"]["max_new_tokens"]
    micro_rows = config["trainer"]["micro_batch_tokens"] // length
    chunk = 512  # trainer.logits_chunk_tokens
    kv = sizes.num_layers * 2 * rows * length * sizes.num_kv_heads * sizes.head_dim * act
    layer_inputs = sizes.num_layers * micro_rows * length * sizes.hidden_size * act
    one_layer = micro_rows * (sizes.num_heads * scored_slots(length) * 4
                              + 3 * length * sizes.intermediate_size * act)  # fmt: skip
    return {
        "parameters": sizes.num_params() * weight,
        "gradients": sizes.num_params() * weight,
        "adamw_moments": 2 * sizes.num_params() * weight,
        "worker_policy": 0,
        "parameter_store_versions": 0,
        "kv_cache": kv,
        "activations": layer_inputs + one_layer,
        "logits": 2 * chunk * sizes.vocab_size * 4,  # a chunk's values and their gradient
    }


def _train(config: dict[str, Any], folder: Path, samples: list[tuple[float, int]]) -> list[dict]:
    """Runs ``rlax train``; returns its metrics, adding (seconds, RSS bytes) to ``samples``."""
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "rlax_core.cli", "train", str(path),
               "--run-dir", str(folder / "run"), "--no-progress"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    started = time.monotonic()

    def sample() -> None:
        watched = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                samples.append((time.monotonic() - started, watched.memory_info().rss))
            except psutil.NoSuchProcess:
                return
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"rlax train exited {process.returncode}: {err[-3000:]}")
    return read_metrics(folder / "run")[1:]


def _matmul_rate() -> float:
    """FLOP/s of an fp32 (2048 × 896) @ (896 × 4864) product, the best of 10."""
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(0), (2048, 896), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (896, 4864), jnp.float32)
    product = jax.jit(jnp.matmul)
    product(x, w).block_until_ready()
    best = float("inf")
    for _ in range(10):
        started = time.perf_counter()
        product(x, w).block_until_ready()
        best = min(best, time.perf_counter() - started)
    return 2 * 2048 * 896 * 4864 / best


def _record_decode(bench: Bench, config: dict[str, Any], *, quick: bool) -> None:
    """The worker's decode for a run's model, as the rate its steps read the weights."""
    sizes = _sizes(config)
    model = init_model(sizes, seed=0)
    batch, prompt_len, new_tokens = 8, 64, 9 if quick else 33
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, sizes.vocab_size, (batch, prompt_len)).tolist()
    times = generate.rlax_times(model, prompts, new_tokens, repeats=2)
    decode = generate.token_rates(times, batch, prompt_len, new_tokens)[1]
    label = f"{config['model']['preset']} {sizes.param_dtype} batch {batch}"
    generate.record_weight_reads(bench, label, model, batch, {"rlax": decode})


def _check_gap(config: QwenConfig, tokens: int) -> float:
    """The worst gap of the worker's log-probability check on one batch of ``config``."""
    sampler = Sampler(init_model(config, seed=0))
    prompts = np.random.default_rng(0).integers(0, config.vocab_size, (2, 64)).tolist()
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    out = sampler.generate(prompts, params, seed=0, samples_per_prompt=4)
    rows = [prompt for prompt in prompts for _ in range(4)]
    return max(logprob_gaps(sampler, rows, out.tokens, out.policy_logprobs, 1.0))


def _record_gap_floor(bench: Bench, *, quick: bool) -> None:
    """What sets the bf16 gap: removed by fp32 activations alone, it is their rounding."""
    base = QwenConfig.tiny() if quick else QwenConfig.preset(PRESET)
    tokens = 16 if quick else 256
    gaps = {
        (weights, compute): _check_gap(base.replace(param_dtype=weights, dtype=compute), tokens)
        for weights, compute in (("float32", "float32"), ("bfloat16", "bfloat16"),
                                 ("bfloat16", "float32"))
    }  # fmt: skip
    bench.record(
        f"worker's logprob check, bf16, {tokens} tokens", subject=gaps[("bfloat16", "bfloat16")],
        baseline=gaps[("float32", "float32")], unit="nats", higher_is_better=False,
        baseline_label="fp32",
    )  # fmt: skip
    bench.record(
        f"worker's logprob check, bf16 weights and fp32 activations, {tokens} tokens",
        subject=gaps[("bfloat16", "float32")], baseline=gaps[("bfloat16", "bfloat16")],
        unit="nats", higher_is_better=False, baseline_label="bf16 weights and activations",
    )  # fmt: skip
    bench.notes["gap_floor"] = {"parameters": base.num_params(), "new_tokens": tokens,
                                "samples": 8}  # fmt: skip


def _plot(samples: list[tuple[float, int]], title: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.5))
    axes.plot([t for t, _ in samples], [rss / 2**30 for _, rss in samples])
    axes.set(xlabel="seconds", ylabel="RSS (GiB)", title=title)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


def run(bench: Bench) -> None:
    """Runs the scale suite."""
    quick = bench.quick
    token_counts = (16,) if quick else (256, 1024)
    steps = 4 if quick else 5
    chosen = os.environ.get("RLAX_BENCH_SCALE_RUNS")
    runs = [(d, t) for t in token_counts for d in ("float32", "bfloat16")]
    trainer_runs = [("float32", t) for t in token_counts]
    if chosen and not quick:
        picked = [run.split(":") for run in chosen.split(",")]
        runs = [(d, int(t)) for d, t in (p for p in picked if p[0] != "trainer")]
        trainer_runs = [(d, int(t)) for _, d, t in (p for p in picked if p[0] == "trainer")]
    RESULTS.mkdir(exist_ok=True)
    for dtype, tokens in trainer_runs:
        config = _config(dtype=dtype, tokens=tokens, steps=1, quick=quick)
        micro_batch_tokens = config["trainer"]["micro_batch_tokens"]
        sizes = _sizes(config)
        _scale_trainer.record_trainer(bench, sizes, tokens, micro_batch_tokens, _matmul_rate)
        rows = micro_batch_tokens // (tokens + 64)
        _scale_trainer.record_attention(bench, sizes, tokens, rows)
    if not runs:
        return
    gaps: dict[tuple[str, int], float] = {}
    for dtype, tokens in runs:
        label = f"{dtype} {tokens} tokens"
        config = _config(dtype=dtype, tokens=tokens, steps=steps, quick=quick)
        samples: list[tuple[float, int]] = []
        parameter_bytes = _parameter_bytes(config)
        png = RESULTS / f"scale-rss-{dtype}-{tokens}{'-quick' if quick else ''}.png"
        with tempfile.TemporaryDirectory() as tmp:
            try:
                rows = _train(config, Path(tmp), samples)
            except RuntimeError as exc:  # e.g. killed for memory: say so, run the rest
                peak = max((rss for _, rss in samples), default=0)
                bench.notes[label] = {"failed": str(exc)[-2000:], "peak_rss_bytes": peak}
                continue
            finally:
                if samples:
                    _plot(samples, f"{config['model'].get('preset', 'test model')} {label}", png)
        peak = max(rss for _, rss in samples)
        by_step = {r["step"]: r for r in rows}
        last = max(by_step)
        curve = {key: [round(by_step[s][f"memory/{key}"], 3) for s in sorted(by_step)]
                 for key in ("rss_gib", "arrays_gib")}  # fmt: skip
        bench.record(
            f"{label}: peak RSS (× parameter bytes)",
            subject=peak / parameter_bytes, baseline=4.0, unit="×", higher_is_better=False,
            baseline_label="parameters + gradients + AdamW moments",
        )  # fmt: skip
        bench.record(
            f"{label}: RSS after step {last} ÷ after step 3",
            subject=by_step[last]["memory/rss_gib"] / by_step[3]["memory/rss_gib"],
            baseline=1.0, unit="×", higher_is_better=False, baseline_label="flat",
        )  # fmt: skip
        steady = [r for r in rows if r["step"] > 1]
        bench.record(
            f"{label}: trainer FLOP/s",
            subject=sum(r["throughput/train_flops_per_s"] for r in steady) / len(steady),
            baseline=_matmul_rate(), unit="FLOP/s", higher_is_better=True,
            baseline_label="fp32 matrix product (2048 × 896 × 4864)",
        )  # fmt: skip
        bench.record(
            f"{label}: checkpoint wait per step (s)",
            subject=sum(r["time/checkpoint_wait_s"] for r in steady) / len(steady),
            baseline=sum(r["time/step_s"] for r in steady) / len(steady),
            unit="s", higher_is_better=False, baseline_label="the step's time",
        )  # fmt: skip
        gaps[(dtype, tokens)] = max(r["logprob_gap/trainer_max"] for r in rows)
        step_s = sum(r["time/step_s"] for r in steady) / len(steady)
        generation = sum(r["time/wait_s"] for r in steady) / len(steady)
        training = sum(r["time/train_s"] for r in steady) / len(steady)
        bench.notes[label] = {
            "parameter_bytes": parameter_bytes,
            "budget_bytes": _budget(config),
            "peak_rss_bytes": peak,
            "rss_gib_by_step": curve["rss_gib"],
            "arrays_gib_by_step": curve["arrays_gib"],
            "step_s": step_s,
            "generation_s": generation,
            "training_s": training,
            "publishing_and_rest_s": step_s - generation - training,
            "logprob_gap_max": gaps[(dtype, tokens)],
            "rss_png": str(png),
        }  # fmt: skip
    _record_gap_floor(bench, quick=quick)
    for dtype in sorted({d for d, _ in runs}):
        _record_decode(bench, _config(dtype=dtype, tokens=1, steps=1, quick=quick), quick=quick)
    for tokens in sorted({t for _, t in runs}):
        if ("bfloat16", tokens) in gaps:
            fp32 = gaps.get(("float32", tokens))
            bench.record(
                f"bf16 logprob gap, {tokens} tokens",
                subject=gaps[("bfloat16", tokens)], baseline=5e-3 if fp32 is None else fp32,
                unit="nats", higher_is_better=False,
                baseline_label="the 5e-3 target" if fp32 is None else "fp32",
            )  # fmt: skip
