"""Times Tunix's GRPO learner, in the side venv from scripts/lib/tunix-venv.sh.

    python -m benchmarks._tunix_grpo CHECKPOINT JOB.json OUT.json  # from the repository root

One ``GRPOLearner`` over an ``RLCluster`` with the vanilla rollout engine; actor and
rollout share one plain ``jax.sharding.Mesh`` on the CPU devices (``jax.make_mesh``
fails on CPU), so they share weights and there is no weight sync. The checkpoint is
loaded with ``tunix.models.qwen2.params.create_model_from_safe_tensors`` and the
tokenizer (the same tokenizer.json as RLAX's) through transformers.

A step's time is measured from the learner's pull of its batch of prompts to the pull
of the next one (the learner pulls a step's prompts first thing): generation, rewards,
advantages and the training update. The last step is never timed (``train`` ends it
with teardown); the job's ``warmup_steps`` first steps (compilation) are dropped by the
caller. The reward is exact match of the completion with the answer.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import optax
from transformers import AutoTokenizer
from tunix.models.qwen2 import params as params_lib
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout

from benchmarks._tunix_model import model_config


def exact_match(prompts: list[str], completions: list[str], answer: list[str], **_) -> list[float]:
    """1 when the completion is the answer (the reversed number), else 0."""
    return [float(c.strip() == str(a).strip()) for c, a in zip(completions, answer, strict=True)]


def batches(job: dict, pulls: list[float]) -> Iterator[dict]:
    """The job's prompt batches; records when the learner pulls each one."""
    per_step = job["prompts_per_step"]
    questions, answers = job["questions"], job["answers"]
    for step in range(job["steps"]):
        pulls.append(time.perf_counter())
        rows = slice(step * per_step, (step + 1) * per_step)
        # Arrays, not lists: the learner repeats each leaf of the batch's pytree.
        yield {"prompts": np.array(questions[rows]), "answer": np.array(answers[rows])}


def main() -> None:
    checkpoint, job_path, out_path = map(Path, sys.argv[1:4])
    job = json.loads(job_path.read_text())
    config = model_config(checkpoint)
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(-1, 1), ("fsdp", "tp"))
    model = params_lib.create_model_from_safe_tensors(str(checkpoint), config, mesh)
    tokenizer = AutoTokenizer.from_pretrained(job["tokenizer"])
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=job["max_new_tokens"],
        max_prompt_length=job["max_prompt_length"],
        kv_cache_size=job["max_prompt_length"] + job["max_new_tokens"] + 8,
        temperature=job["temperature"],
        top_p=1.0,
        top_k=None,
        eos_tokens=job["stop_token_ids"],
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(job["max_grad_norm"]),
        optax.adamw(job["learning_rate"], b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0),
    )
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer,
        eval_every_n_steps=10**9,  # no evaluation
        max_steps=job["steps"],
    )
    cluster = rl_cluster_lib.RLCluster(
        actor=model,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh={role: mesh for role in rl_cluster_lib.Role},
            rollout_engine="vanilla",
            training_config=training,
            rollout_config=rollout,
        ),
    )
    algorithm = grpo_learner.GRPOConfig(
        num_generations=job["samples_per_prompt"],
        num_iterations=1,
        beta=0.0,  # no reference model, like the RLAX run (kl_coef 0)
        epsilon=job["clip_low"],
        loss_agg_mode="token-mean",  # RLAX's aggregation "token"
    )
    algorithm.epsilon_high = job["clip_high"]  # read by Tunix's grpo loss when present
    learner = grpo_learner.GRPOLearner(cluster, algorithm, reward_fns=exact_match)
    pulls: list[float] = []
    learner.train(batches(job, pulls))
    pulls.append(time.perf_counter())  # train() returned
    lengths = _completion_lengths(cluster)
    step_s = list(np.diff(pulls[:-1]))  # the last step includes train()'s teardown
    out_path.write_text(
        json.dumps({"jax": jax.__version__, "step_s": step_s, "completion_lengths": lengths})
    )


def _completion_lengths(cluster: rl_cluster_lib.RLCluster) -> list[float]:
    """Mean completion length (tokens) of each step, as the learner logged it."""
    logger = cluster._rl_metrics_logger  # the learner's own metrics (private)
    for mode in (rl_cluster_lib.Mode.TRAIN, "train"):
        if logger.metric_exists("completions", "mean_length", mode):
            return [float(v) for v in logger.get_metric_history("completions", "mean_length", mode)]
    return []


if __name__ == "__main__":
    main()
