"""``rlax eval CONFIG --checkpoint DIR``: pass@k of a trained policy, without training.

The evaluation a run does at its ``eval.every_steps`` (the same evaluator, seeds, engine,
environment and judge), on the config's held-out set or on any prompt file
(``--data``, read with the held-out set's template and fields). The policy is a Hugging
Face folder (a run's ``final/``), a run's Orbax checkpoint (``checkpoints/N``) or a run
directory (see :mod:`rlax_core.run_dir.trained_policy`). ``--out`` writes one JSON
line per prompt: its id, prompt, answer, the completions and each one's verdict and
reward.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, parse_overrides
from rlax_core.config.run_config import RunConfigBase
from rlax_core.config.sections.data import DatasetConfig
from rlax_core.errors import ConfigError
from rlax_core.storage import AnyPath, is_remote, storage_path, write_text_atomically


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``eval`` subcommand."""
    sub = commands.add_parser(
        "eval",
        help="pass@k of a checkpoint on the config's eval set (or a prompt file), no training",
        description="Sample each held-out prompt eval.samples_per_prompt times with a "
        "trained policy, judge the completions with the config's judge and report pass@k "
        "(eval.ks). The settings are the run's: change them with --set (e.g. --set "
        "eval.max_prompts=50).",
    )
    sub.add_argument(
        "config", type=Path, help="YAML run config (a run's RUN_DIR/config.yaml works)"
    )
    sub.add_argument(
        "--checkpoint",
        required=True,
        help="the policy: a Hugging Face folder (RUN_DIR/final), a run's Orbax checkpoint "
        "(RUN_DIR/checkpoints/N) or a run directory; local, gs://… or s3://…",
    )
    sub.add_argument(
        "--data",
        help="JSONL or Parquet prompts to evaluate instead of data.eval (read with data.eval's "
        "template and fields, else data.train[0]'s)",
    )
    sub.add_argument("--out", help="write one JSON line per prompt here (local, gs://… or s3://…)")
    add_set_argument(sub)
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Evaluates the checkpoint; prints pass@k; errors in what is given exit 2."""
    config = load_run_config(args.config, overrides=parse_overrides(args.overrides))
    config_dir = args.config.resolve().parent
    if config.verifier is None:
        raise ConfigError(f"{args.config}: has no verifier section: pass@k needs its judge")
    dataset = _dataset(config, args.data)
    out = _output(args.out)
    from rlax_core.run_dir.trained_policy import load_policy, locate_policy

    policy = locate_policy(args.checkpoint)  # before the slow imports: a typo fails at once
    from rlax_core.plugins.manager import load_registry
    from rlax_core.plugins.registry import BuildContext
    from rlax_core.rl.roles import components
    from rlax_core.rl.roles.evaluator import EvaluatedPrompt, Evaluator

    registry = load_registry()
    tokenizer = components.load_tokenizer(config, config_dir)
    context = BuildContext(registry, run_config=config)
    environment = registry.build("environment", config.environment, context)
    prompts = _prompts(config, dataset, config_dir, tokenizer, environment)
    model = load_policy(policy, config, config_dir)
    components.check_vocabulary(model.config.vocab_size, tokenizer)
    judge = registry.build("judge", config.verifier.judge, context)
    evaluator = Evaluator(
        model,
        tokenizer=tokenizer,
        judge=judge,
        prompts=prompts,
        config=config.eval,
        rollout=config.rollout,
        stop_token_ids=components.stop_token_ids(tokenizer),
        seed=config.run.seed,
        environment=environment,
    )
    n = config.eval.samples_per_prompt
    what = (
        f"{evaluator.num_prompts} prompts × {n} samples of {dataset.path or dataset.dataset_name}"
    )
    print(f"rlax eval: {policy.describe()} on {what}", file=sys.stderr, flush=True)
    lines: list[str] = []

    def record(done: EvaluatedPrompt) -> None:
        lines.append(json.dumps(_prompt_record(done, tokenizer), ensure_ascii=False))

    started = time.monotonic()
    try:
        metrics = evaluator.run(model, on_prompt=record if out is not None else None)
    finally:
        judge.close()
        environment.close()
    if out is not None:
        write_text_atomically(out, "".join(f"{line}\n" for line in lines))
    scores = "  ".join(
        f"{key.split('/', 1)[1]} {value:.3f}"
        for key, value in sorted(metrics.items(), key=lambda kv: _order(kv[0]))
    )
    print(f"{scores}  ({time.monotonic() - started:.0f} s)")
    if out is not None:
        print(f"per prompt: {out}")
    return 0


def _dataset(config: RunConfigBase, data: str | None) -> DatasetConfig:
    """The prompts to evaluate: ``data.eval``, or ``--data`` read as it would be read."""
    section = config.data
    base = section.eval if section is not None else None
    if data is None:
        if base is None:
            raise ConfigError(
                "the config has no held-out set (data.eval): give --data FILE, or set "
                "data.eval in the config"
            )
        return base
    if base is None and section is not None and section.train:
        base = section.train[0]
    if base is None or base.source is not None:
        raise ConfigError(
            f"--data {data}: the config has no dataset read from a file (data.eval, else "
            "data.train[0]) whose prompt_template and answer_field would read it; set "
            "data.eval: {path: FILE, prompt_template: ..., answer_field: ...} instead"
        )
    path = data if "://" in data else os.path.abspath(data)  # relative to the working dir
    if "://" not in data and not Path(path).is_file():
        raise ConfigError(f"--data {data}: no such file")
    try:
        return DatasetConfig.model_validate({**base.model_dump(), "path": path})
    except ValidationError as exc:
        raise ConfigError(f"--data {data}: {exc.errors()[0]['msg']}") from None


def _output(out: str | None) -> AnyPath | None:
    """Where ``--out`` writes (its folder made); refused before anything is evaluated."""
    if out is None:
        return None
    path = storage_path(out if is_remote(out) else os.path.abspath(out))
    if not is_remote(out):
        if Path(path).is_dir():
            raise ConfigError(f"--out {out}: is a directory; give a file name (e.g. eval.jsonl)")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return path


def _prompts(config, dataset: DatasetConfig, config_dir: Path, tokenizer, environment) -> list:
    """The prompts encoded as the run encodes them (the environment's tools listed)."""
    from rlax_core.data import PromptDataset
    from rlax_core.rl.roles import components

    loaded = PromptDataset.load(dataset, config_dir)
    tools = [tool.schema() for tool in environment.tools]
    encode = components.prompt_encoder(tokenizer, config.rollout.chat_template, tools)
    examples = (loaded[i] for i in range(len(loaded)))
    return [(ex.example_id, encode(ex), ex.problem) for ex in examples]


def _prompt_record(done: Any, tokenizer: Any) -> dict[str, Any]:
    """One line of ``--out``."""
    record: dict[str, Any] = {
        "id": done.example_id,
        "prompt": tokenizer.decode(done.prompt_tokens, skip_special_tokens=False),
    }
    if "answer" in done.problem:
        record["answer"] = done.problem["answer"]
    record["completions"] = done.completions
    record["verdicts"] = [str(v.status) for v in done.verdicts]
    record["rewards"] = [v.reward for v in done.verdicts]
    record["correct"] = sum(str(v.status) == "AC" for v in done.verdicts)
    return record


def _order(key: str) -> tuple[int, int, str]:
    """pass@k by k first, then the rest by name."""
    name = key.split("/", 1)[1]
    if name.startswith("pass@"):
        return (0, int(name[5:]), name)
    return (1, 0, name)
