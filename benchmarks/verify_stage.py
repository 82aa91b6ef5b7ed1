"""The verifier stage against inline judging when judging takes time: samples/s, busy worker.

Every run is the embedded run of ``rlax train`` (trainer, one worker thread and, with the
stage, verifier threads in this process; the inproc transport) from a random checkpoint
written here, without the warm start and the evaluation, like the ``rl`` suite.

**Code** (examples/code_quickstart.yaml's task, data, tokenizer, model and batch: 8
prompts × 8 samples a step, 12 new tokens): the code judge sends every completion to the
``lambda`` sandbox through the local Lambda Invoke API, which runs the real handler (a
fresh process per invocation; each program under bubblewrap when root) on this machine
after waiting ``DELAYS_S`` per invocation: the latency of a remote function. Per delay,
runs that differ only in judging:

* *inline*: the worker judges its batch (one invocation) before it samples the next;
* *stage*: ``VERIFIERS`` verifier threads judging ``VERIFIER_GROUPS`` groups a call (one
  invocation of 32 programs), Lambda concurrency ``VERIFIERS`` at the client and the
  server: ``VERIFIERS × VERIFIER_GROUPS`` ≥ the ``8 × (k + 1)`` groups the controller
  keeps in flight, so every group in flight can be in judging at once;
* *no judging* (the ceiling): :class:`~benchmarks._instrumented_run.FixedJudge`, inline.

These run at ``max_staleness`` ``K[delay]`` (the quickstart's is 1): the stage hides a
latency only within the pipeline the staleness bound allows (Little's law: samples/s ≤
groups in flight × 8 / a group's time in flight), and at k = 1 two steps' worth of groups
must cover sampling, an invocation and a train step. So inline and the stage run at k = 1
too. One more run, the stage with no injected delay, measures the limit behind the
target: the handler runs its programs on the cores that sample and train.

**Math** (examples/quickstart.yaml; the math judge, cheap): inline against the stage
with one verifier thread, at the quickstart's k = 1, in ``MATH_ROUNDS`` alternating
rounds, pooled.

Figures come from the runs' ``metrics.jsonl`` over the steps after the first
``DISCARDED_STEPS`` (compilation, the pipeline filling): samples/s = sequences trained /
wall time between those metric lines; the worker's generation busy fraction = the share
of that time spent in its sampler (generate and the log-prob check), timed by
:class:`~benchmarks._instrumented_run.TimedSampler`, which compiles the sampler for
every batch size first (judging inline is not busy time). Each figure is a ratio to the
no-judging run of its delay in the same run (k = 1 and math: the stage to inline).
"""

from __future__ import annotations

import copy
import itertools
import tempfile
from pathlib import Path
from typing import Any

import yaml

from benchmarks._instrumented_run import FIXED_JUDGE, Setting, registry_with_fixed_judge, train
from rlax_core.bench import Bench
from rlax_core.config.loading import validate_run_config
from rlax_core.models import save_pretrained
from rlax_core.plugins.registry import Registry
from rlax_core.rl.roles import components

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

DELAYS_S = (0.5, 2.0)
# max_staleness of the code runs by delay, and of the run with no delay: deep enough
# that the groups in flight, 8 × (k + 1), cover a group's time in flight (a delay, the
# handler's own time on a busy CPU, sampling, a train step) at the rate the handler allows.
K = {0.5: 6, 2.0: 12, 0.0: 6}
VERIFIERS = 32  # × VERIFIER_GROUPS = 128 ≥ 8 × (12 + 1): every group in flight judged at once
VERIFIER_GROUPS = 4
STEPS = 40
DISCARDED_STEPS = 3
# The math pair differ by less than a busy moment of a shared machine: repeated,
# alternating, and pooled.
MATH_ROUNDS = 3
# --quick: one delay, a one-layer model, a small batch, a few steps; no k = 1 or limit runs.
QUICK = {
    "delays": (0.5,), "k": {0.5: 2}, "verifiers": 4, "steps": 4, "discarded": 1,
    "overrides": {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64,
                  "num_heads": 2, "num_kv_heads": 1},
    # One group a batch: the one sampler shape, compiled before the first step anyway.
    "rollout": {"prompts_per_step": 4, "samples_per_prompt": 4, "groups_per_batch": 1},
}  # fmt: skip


def base_config(example: str, quick: bool) -> dict[str, Any]:
    """An example's config without warm start and evaluation (``quick``: smaller)."""
    config = yaml.safe_load((EXAMPLES / example).read_text())
    for section in ("warm_start", "eval"):
        config.pop(section, None)
    config["data"].pop("eval", None)
    if quick:
        config["model"]["overrides"] = QUICK["overrides"]
        config["rollout"].update(QUICK["rollout"])
    return config


def run_config(base: dict, checkpoint: Path, registry: Registry, *, name: str, k: int,
               steps: int, verifier: dict[str, Any]) -> Any:  # fmt: skip
    """The config of one run: ``base`` from ``checkpoint``, judged as ``verifier`` says."""
    config = copy.deepcopy(base)
    config["run"]["name"] = f"bench-verify-stage-{name}"
    tokenizer = components.resolve(config["model"]["tokenizer"], EXAMPLES)
    config["model"] = {"path": str(checkpoint), "tokenizer": str(tokenizer)}
    config["staleness"] = {"max_staleness": k, "pull_every": 1}
    config["verifier"] = verifier
    trainer = config["trainer"]
    trainer["total_steps"] = steps
    trainer["warmup_steps"] = min(trainer.get("warmup_steps", 0), steps - 1)
    config["checkpoint"] = {"every_steps": steps}  # no checkpoint inside the timed steps
    return validate_run_config(config, registry)


def verifier_section(setting: str, judge: str, *, endpoint: str = "", verifiers: int = 1) -> dict:
    """The ``verifier`` section of a setting: inline, stage or none (the fixed judge)."""
    if setting == "none":
        return {"placement": "inline", "judge": {"type": FIXED_JUDGE}}
    section: dict[str, Any] = {"placement": setting, "judge": {"type": judge}}
    if judge == "code":
        section["sandbox"] = {"type": "lambda", "endpoint_url": endpoint, "concurrency": verifiers}
    if setting == "stage":
        section.update(workers=verifiers, groups_per_batch=VERIFIER_GROUPS)
    return section


def plan(quick: bool) -> list[tuple[str, float, int, str]]:
    """The code runs in order, as (name, delay, k, setting); a server per delay."""
    k = QUICK["k"] if quick else K
    runs = []
    for delay in QUICK["delays"] if quick else DELAYS_S:
        runs += [(f"{s}-{delay:g}s", delay, k[delay], s) for s in ("none", "inline", "stage")]
        if not quick:
            runs += [(f"{s}-{delay:g}s-k1", delay, 1, s) for s in ("inline", "stage")]
    if not quick:
        runs.append(("stage-0s", 0.0, k[0.0], "stage"))
    return runs


def run(bench: Bench) -> None:
    """Runs the verify_stage suite."""
    from rlax_verifiers.sandbox.aws_lambda.client import LambdaSandboxConfig
    from rlax_verifiers.sandbox.aws_lambda.local_api import FunctionSettings, LocalLambdaServer

    quick = bench.quick
    verifiers = QUICK["verifiers"] if quick else VERIFIERS
    steps = QUICK["steps"] if quick else STEPS
    discarded = QUICK["discarded"] if quick else DISCARDED_STEPS
    math_rounds = 1 if quick else MATH_ROUNDS
    registry = registry_with_fixed_judge()
    bases = {"code": base_config("code_quickstart.yaml", quick),
             "math": base_config("quickstart.yaml", quick)}  # fmt: skip
    runs = plan(quick)
    figures = {name: Setting() for name in [r[0] for r in runs] + ["math inline", "math stage"]}
    invocations: dict[str, int] = {}
    throttled: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for task, base in bases.items():
            model = components.build_model(validate_run_config(base, registry), EXAMPLES)
            save_pretrained(model, work / f"checkpoint-{task}")
        for delay in dict.fromkeys(delay for _, delay, _, _ in runs):
            settings = FunctionSettings(concurrency=verifiers, delay_s=delay)
            server = LocalLambdaServer(settings).start()
            try:
                for name, _, k, setting in (r for r in runs if r[1] == delay):
                    section = verifier_section(setting, "code", endpoint=server.endpoint_url,
                                               verifiers=verifiers)  # fmt: skip
                    config = run_config(bases["code"], work / "checkpoint-code", registry,
                                        name=name, k=k, steps=steps, verifier=section)  # fmt: skip
                    calls, throttles = server.invocations, server.throttled
                    rows, spans = train(config, registry, EXAMPLES, work / name)
                    figures[name].add(rows, spans, discarded)
                    invocations[name] = server.invocations - calls
                    throttled[name] = server.throttled - throttles
            finally:
                server.stop()
        for round_, setting in itertools.product(range(math_rounds), ("inline", "stage")):
            name = f"math-{setting}-{round_}"
            section = verifier_section(setting, "math")
            config = run_config(bases["math"], work / "checkpoint-math", registry, name=name,
                                k=1, steps=steps, verifier=section)  # fmt: skip
            rows, spans = train(config, registry, EXAMPLES, work / name)
            figures[f"math {setting}"].add(rows, spans, discarded)
    _report(bench, figures, runs, verifiers)
    bench.notes.update(
        steps_per_run=steps, discarded_steps=discarded, runs=runs, math_rounds=math_rounds,
        verifier_threads=verifiers, verifier_groups_per_batch=VERIFIER_GROUPS,
        lambda_concurrency=verifiers, lambda_workers=LambdaSandboxConfig().workers,
        invocations=invocations, throttled=throttled,
        rollout={task: base["rollout"] for task, base in bases.items()},
        model={task: base["model"].get("overrides") for task, base in bases.items()},
        per_setting={name: fig.summary() for name, fig in figures.items()},
    )  # fmt: skip


def _pair(bench: Bench, what: str, subject: Setting, baseline: Setting, subject_label: str,
          baseline_label: str) -> None:  # fmt: skip
    """Records samples/s and the generation busy fraction of ``subject`` beside ``baseline``."""
    labels = {"subject_label": subject_label, "baseline_label": baseline_label}
    bench.record(f"{what}: samples/s", subject=subject.samples_per_s,
                 baseline=baseline.samples_per_s, unit="samples/s", higher_is_better=True,
                 **labels)  # fmt: skip
    bench.record(f"{what}: worker generation busy", subject=subject.busy, baseline=baseline.busy,
                 unit="fraction", higher_is_better=True, **labels)  # fmt: skip


def _report(bench: Bench, figures: dict[str, Setting], runs: list, verifiers: int) -> None:
    stage = f"stage, {verifiers} verifiers"
    names = {r[0]: r for r in runs}
    for name, delay, k, setting in runs:
        if setting == "none":
            continue
        if name.endswith("-k1"):  # the quickstart's staleness: the stage beside inline
            if setting == "stage":
                _pair(bench, f"code, lambda +{delay:g} s, k=1", figures[name],
                      figures[f"inline-{delay:g}s-k1"], stage, "inline judging, k=1")  # fmt: skip
            continue
        ceiling_name = f"none-{delay:g}s" if delay else f"none-{runs[0][1]:g}s"
        label = stage if setting == "stage" else "inline judging"
        what = f"code, lambda +{delay:g} s, k={k}, {setting}"
        _pair(bench, what, figures[name], figures[ceiling_name], label,
              f"no judging ({ceiling_name}), k={k}")  # fmt: skip
    if "stage-0s" in names:  # how much of the delay the stage hides: beside no delay at all
        for delay in dict.fromkeys(r[1] for r in runs if r[1]):
            _pair(bench, f"code, stage, lambda +{delay:g} s vs +0 s", figures[f"stage-{delay:g}s"],
                  figures["stage-0s"], f"{stage}, +{delay:g} s", f"{stage}, +0 s")  # fmt: skip
    _pair(bench, "math quickstart, k=1", figures["math stage"], figures["math inline"],
          "stage, 1 verifier", "inline judging")  # fmt: skip
