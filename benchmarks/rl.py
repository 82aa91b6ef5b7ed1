"""The RL loop end to end: samples/s at max_staleness k = 0, 1, 2, and a step beside Tunix's GRPO.

Every run is the embedded run of ``rlax train`` (trainer and one worker thread in this
process, the inproc transport) on the quickstart's task, data, tokenizer, model size,
batch shape and objective (examples/quickstart.yaml), without the warm start and the
evaluation, from one random checkpoint written here (the quickstart's initialisation).
The runs only differ in ``staleness.max_staleness``. Figures come from the runs' own
``metrics.jsonl``; the first ``DISCARDED_STEPS`` steps of every run (compilation) are
left out:

* end-to-end samples/s = sequences trained / wall time between metric lines;
* trainer tokens/s = loss tokens / ``time/train_s`` (the optimiser step alone);
* the ideal async speedup, from the synchronous run: with generation taking ``gen``
  (``time/wait_s``: the trainer waits for the rollouts) and the trainer's own work
  ``train`` (``time/step_s − time/wait_s``) per step, perfect overlap gives
  ``(gen + train) / max(gen, train)``. Both run on the same CPU cores here, so
  overlapping them also slows each down.

Tunix (full mode; side venv from scripts/lib/tunix-venv.sh): ``GRPOLearner`` with its
``RLCluster`` and the vanilla rollout on the same checkpoint, tokenizer, prompts (in
the same order), batch shape, sampling temperature, stop tokens, reward (exact match),
clip range, token-mean loss, AdamW and learning rate; its step time is set beside
RLAX's synchronous (k = 0) step time and its k = 1 step time (the quickstart's
setting). See benchmarks._tunix_grpo.

In-flight weight updates, off and on: the same embedded run at k = 1 on the rollout
engine (``rollout.engine.kind: paged``), with long-tailed completion lengths: a random
policy over the quickstart's 259-token vocabulary samples a stop token about once in
every 259 tokens, so completions run to geometric lengths (capped at
``IN_FLIGHT["max_new_tokens"]``). Set side by side: end-to-end samples/s, and the
staleness of the trained tokens, each counted by the version that sampled it (at k = 1
a token is 0 or 1 versions old, so the on-policy fraction and the mean give the whole
distribution).

Runs are repeated in ``ROUNDS`` rounds (k = 0, 1, 2, Tunix, the in-flight pair, then
again), so a busy moment of a shared machine does not land on one side only; figures
pool the rounds. ``RLAX_BENCH_RL_PARTS`` runs some of the parts (``staleness``,
``in_flight``, ``tunix``; e.g. ``in_flight``): the whole suite takes hours here;
``RLAX_BENCH_RL_ROUNDS`` runs another number of rounds.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from benchmarks import run_module
from rlax_core.bench import Bench, chosen_parts
from rlax_core.config.loading import validate_run_config
from rlax_core.models import save_pretrained
from rlax_core.rl.roles import components, start
from rlax_core.run_dir.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
QUICKSTART = EXAMPLES / "quickstart.yaml"
# Tunix is installed only in its side venv, so this interpreter cannot import the module:
# it is named, and run there.
TUNIX_MODULE = "benchmarks._tunix_grpo"

DISCARDED_STEPS = 10
STEPS = 50
ROUNDS = 2
TUNIX_STEPS = 30
PARTS = ("staleness", "in_flight", "tunix")
# --quick: a smaller model and batch, a few steps, k = 0 and 1, no Tunix.
QUICK = {
    "discarded": 1,
    "steps": 3,
    "overrides": {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                  "num_heads": 2, "num_kv_heads": 1},
    "rollout": {"prompts_per_step": 4, "samples_per_prompt": 4, "groups_per_batch": 4},
}  # fmt: skip
# The in-flight pair: the rollout engine at k = 1, long completions (quick: shorter).
# 16 slots: at 64 the worker sampled a step's batch faster than the trainer trained it
# here, sat idle when each version was published, and no swap landed mid-completion.
IN_FLIGHT = {"max_new_tokens": 512, "engine": {"kind": "paged", "slots": 16,
                                               "max_prompt_tokens": 16}}  # fmt: skip
QUICK_IN_FLIGHT = {"max_new_tokens": 24, "engine": {"kind": "paged", "slots": 8,
                                                    "max_prompt_tokens": 16}}  # fmt: skip


def base_config(quick: bool) -> dict[str, Any]:
    """The quickstart's config without warm start and evaluation (``quick``: smaller)."""
    config = yaml.safe_load(QUICKSTART.read_text())
    for section in ("warm_start", "eval"):
        config.pop(section, None)
    config["data"].pop("eval", None)
    if quick:
        config["model"]["overrides"] = QUICK["overrides"]
        config["rollout"].update(QUICK["rollout"])
    return config


def run_config(
    base: dict[str, Any], checkpoint: Path, *, k: int, steps: int, rollout: dict | None = None
) -> Any:
    """The config of one run: ``base`` from ``checkpoint`` with max_staleness ``k`` (and
    these ``rollout`` fields)."""
    config = copy.deepcopy(base)
    config["run"]["name"] = f"bench-rl-k{k}"
    config["rollout"].update(copy.deepcopy(rollout or {}))
    tokenizer = components.resolve(config["model"]["tokenizer"], EXAMPLES)
    config["model"] = {"path": str(checkpoint), "tokenizer": str(tokenizer)}
    config["staleness"] = {"max_staleness": k, "pull_every": 1}
    trainer = config["trainer"]
    trainer["total_steps"] = steps
    trainer["warmup_steps"] = min(trainer.get("warmup_steps", 0), steps - 1)
    config["checkpoint"] = {"every_steps": steps}  # no checkpoint inside the timed steps
    return validate_run_config(config)


def train(config: Any, run_dir: Path) -> list[dict]:
    """One embedded run (``rlax train``'s default role); its metrics, RL steps only."""
    start.run_all(config, EXAMPLES, run_dir, resume=False, stop=threading.Event(), progress=False)
    return [row for row in read_metrics(run_dir) if row["step"] > 0]


class Figures:
    """The measured steps of one setting's runs, pooled over rounds."""

    def __init__(self) -> None:
        self.sequences = 0.0
        self.wall_s = 0.0
        self.loss_tokens = 0.0
        self.train_s = 0.0
        self.step_s: list[float] = []
        self.intervals_s: list[float] = []
        self.wait_s: list[float] = []
        self.staleness_max = 0.0
        self.dropped = 0.0
        self.token_staleness: list[float] = []  # per step: the mean over its tokens
        self.on_policy_tokens: list[float] = []  # per step: the fraction at staleness 0
        self.mixed: list[float] = []  # per step: the rollouts that span versions
        self.lengths: list[float] = []

    def add(self, rows: list[dict], discarded: int) -> None:
        """Adds a run's steps after the first ``discarded``."""
        kept = [r for r in rows if r["step"] > discarded]
        start = next(r["time"] for r in rows if r["step"] == discarded)
        self.wall_s += kept[-1]["time"] - start
        self.sequences += sum(r["batch/sequences"] for r in kept)
        self.loss_tokens += sum(r["batch/loss_tokens"] for r in kept)
        self.train_s += sum(r["time/train_s"] for r in kept)
        self.step_s += [r["time/step_s"] for r in kept]
        times = {r["step"]: r["time"] for r in rows}
        self.intervals_s += [times[r["step"]] - times[r["step"] - 1] for r in kept]
        self.wait_s += [r["time/wait_s"] for r in kept]
        self.staleness_max = max(self.staleness_max, *(r["staleness/max"] for r in kept))
        self.dropped += rows[-1]["staleness/dropped"]
        self.token_staleness += [r["staleness/token_mean"] for r in kept]
        self.on_policy_tokens += [r["staleness/on_policy_token_fraction"] for r in kept]
        self.mixed += [r["completion/mixed_version_fraction"] for r in kept]
        self.lengths += [r["completion/length_mean"] for r in kept]

    @property
    def samples_per_s(self) -> float:
        """Sequences trained per second of wall time."""
        return self.sequences / self.wall_s

    @property
    def train_tokens_per_s(self) -> float:
        """Loss tokens per second of the optimiser step."""
        return self.loss_tokens / self.train_s

    @property
    def ideal_speedup(self) -> float:
        """(gen + train) / max(gen, train) from the mean per-step times."""
        gen = statistics.fmean(self.wait_s)
        own = statistics.fmean(self.step_s) - gen
        return (gen + own) / max(gen, own)


def tunix_job(config: Any, steps: int) -> dict[str, Any]:
    """What the Tunix side runs: the RLAX run's prompts in its order, and its settings."""
    tokenizer = components.load_tokenizer(config, EXAMPLES)
    mixture, _ = components.train_prompts(config, EXAMPLES, tokenizer)
    rollout, algorithm, trainer = config.rollout, config.algorithm, config.trainer
    examples = [mixture.next() for _ in range(steps * rollout.prompts_per_step)]
    longest = max(len(tokenizer.encode(e.prompt)) for e in examples)
    return {
        "tokenizer": str(components.tokenizer_dir(config, EXAMPLES)),
        "questions": [e.prompt for e in examples],
        "answers": [e.problem["answer"] for e in examples],
        "steps": steps,
        "prompts_per_step": rollout.prompts_per_step,
        "samples_per_prompt": rollout.samples_per_prompt,
        "max_new_tokens": rollout.max_new_tokens,
        "max_prompt_length": 1 << (longest - 1).bit_length(),  # Tunix left-pads to this
        "temperature": rollout.temperature,
        "stop_token_ids": list(components.stop_token_ids(tokenizer)),
        "learning_rate": trainer.learning_rate,
        "max_grad_norm": trainer.max_grad_norm,
        "clip_low": algorithm.clip_low,
        "clip_high": algorithm.clip_high,
    }


def run_tunix(python: Path, checkpoint: Path, job: dict[str, Any], work: Path) -> dict:
    """Runs benchmarks._tunix_grpo in the Tunix venv; its step times.

    ``python -m`` in a side venv: a process boundary, not an import.
    """
    (work / "job.json").write_text(json.dumps(job))
    result = run_module(
        python, TUNIX_MODULE, checkpoint, work / "job.json", work / "out.json",
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"the Tunix GRPO run failed:\n{result.stderr[-4000:]}")
    return json.loads((work / "out.json").read_text())


def _tunix_python() -> Path:
    result = subprocess.run(
        [REPO / "scripts" / "lib" / "tunix-venv.sh"], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"could not make the Tunix venv:\n{result.stderr[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def run(bench: Bench) -> None:
    """Runs the rl suite."""
    quick = bench.quick
    parts = chosen_parts("RLAX_BENCH_RL_PARTS", PARTS)
    ks = ((0, 1) if quick else (0, 1, 2)) if "staleness" in parts else ()
    rounds = 1 if quick else int(os.environ.get("RLAX_BENCH_RL_ROUNDS", ROUNDS))
    discarded = QUICK["discarded"] if quick else DISCARDED_STEPS
    steps = QUICK["steps"] if quick else STEPS
    base = base_config(quick)
    figures = {k: Figures() for k in ks}
    in_flight = {False: Figures(), True: Figures()}  # in-flight updates off, on
    if "in_flight" not in parts:
        in_flight = {}
    tunix_python = None if quick or "tunix" not in parts else _tunix_python()
    tunix_steps: list[float] = []
    tunix_lengths: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        checkpoint = work / "checkpoint"
        save_pretrained(components.build_model(validate_run_config(base), EXAMPLES), checkpoint)
        for round_ in range(rounds):
            for k in ks:
                config = run_config(base, checkpoint, k=k, steps=steps)
                rows = train(config, work / f"round{round_}-k{k}")
                figures[k].add(rows, discarded)
            for on, fig in in_flight.items():
                rollout = {**(QUICK_IN_FLIGHT if quick else IN_FLIGHT), "in_flight_updates": on}
                config = run_config(base, checkpoint, k=1, steps=steps, rollout=rollout)
                fig.add(train(config, work / f"round{round_}-in-flight-{on}"), discarded)
            if tunix_python is not None:
                config = run_config(base, checkpoint, k=0, steps=steps)
                job = tunix_job(config, TUNIX_STEPS)
                out = run_tunix(tunix_python, checkpoint, job, work)
                tunix_steps += out["step_s"][discarded:]
                tunix_lengths += out["completion_lengths"]
                bench.notes["tunix"] = {
                    "jax": out["jax"],
                    "max_prompt_length": job["max_prompt_length"],
                }
    if figures:
        _report(bench, base, figures, discarded, steps, rounds)
    if in_flight:
        _report_in_flight(bench, in_flight, quick)
    if tunix_steps:
        bench.notes["tunix"].update(
            steps_timed=len(tunix_steps), completion_length_mean=statistics.fmean(tunix_lengths),
            step_s_median=statistics.median(tunix_steps),
        )  # fmt: skip
    if tunix_steps and figures:
        # Tunix's learner is synchronous: beside it, RLAX's synchronous step (the same
        # schedule) and the quickstart's own setting, k = 1 (generation overlaps training).
        for k, label in ((0, "k=0 (synchronous)"), (1, "k=1 (the quickstart's setting)")):
            bench.record(
                f"step time, {label}", subject=statistics.median(figures[k].intervals_s),
                baseline=statistics.median(tunix_steps), unit="s", higher_is_better=False,
                baseline_label="Tunix GRPOLearner (vanilla rollout)",
            )  # fmt: skip


def _report(bench: Bench, base: dict, figures: dict[int, Figures], discarded: int,
            steps: int, rounds: int) -> None:  # fmt: skip
    sync = figures[0]
    for k, fig in figures.items():
        if k == 0:
            continue
        bench.record(
            f"end-to-end samples/s, k={k}", subject=fig.samples_per_s,
            baseline=sync.samples_per_s, unit="samples/s", higher_is_better=True,
            baseline_label="k=0 (synchronous), same config",
        )  # fmt: skip
    bench.record(
        "end-to-end samples/s, ideal overlap", subject=sync.samples_per_s * sync.ideal_speedup,
        baseline=sync.samples_per_s, unit="samples/s", higher_is_better=True,
        subject_label="(gen + train) / max(gen, train) of k=0",
        baseline_label="k=0 (synchronous), same config",
    )  # fmt: skip
    for k, fig in figures.items():
        if k == 0:
            continue
        bench.record(
            f"trainer tokens/s, k={k}", subject=fig.train_tokens_per_s,
            baseline=sync.train_tokens_per_s, unit="tokens/s", higher_is_better=True,
            baseline_label="k=0 (synchronous), same config",
        )  # fmt: skip
    rollout = base["rollout"]
    bench.notes.update(
        steps_per_run=steps, discarded_steps=discarded, rounds=rounds,
        prompts_per_step=rollout["prompts_per_step"],
        samples_per_prompt=rollout["samples_per_prompt"],
        max_new_tokens=rollout["max_new_tokens"], model=base["model"]["overrides"],
        per_k={
            k: {
                "samples_per_s": fig.samples_per_s,
                "train_tokens_per_s": fig.train_tokens_per_s,
                "step_s_median": statistics.median(fig.step_s),
                "wait_s_mean": statistics.fmean(fig.wait_s),
                "train_side_s_mean": statistics.fmean(fig.step_s) - statistics.fmean(fig.wait_s),
                "staleness_max": fig.staleness_max,
                "dropped_stale": fig.dropped,
            }
            for k, fig in figures.items()
        },
        ideal_speedup=sync.ideal_speedup,
    )  # fmt: skip


def _report_in_flight(bench: Bench, figures: dict[bool, Figures], quick: bool) -> None:
    off, on = figures[False], figures[True]
    bench.record(
        "in-flight updates: end-to-end samples/s", subject=on.samples_per_s,
        baseline=off.samples_per_s, unit="samples/s", higher_is_better=True,
        subject_label="rollout engine, k=1, in-flight updates on",
        baseline_label="rollout engine, k=1, in-flight updates off",
    )  # fmt: skip
    # The staleness of the trained tokens goes to the notes: a fraction that may be 0
    # makes no ratio.
    bench.notes["in_flight"] = {
        "rollout": QUICK_IN_FLIGHT if quick else IN_FLIGHT,
        **{
            ("on" if key else "off"): {
                "samples_per_s": fig.samples_per_s,
                "token_staleness_mean": statistics.fmean(fig.token_staleness),
                "on_policy_token_fraction": statistics.fmean(fig.on_policy_tokens),
                "mixed_version_fraction": statistics.fmean(fig.mixed),
                "staleness_max": fig.staleness_max,
                "completion_length_mean": statistics.fmean(fig.lengths),
                "step_s_median": statistics.median(fig.step_s),
                "wait_s_mean": statistics.fmean(fig.wait_s),
            }
            for key, fig in figures.items()
        },
    }
