"""The trainer alone at a real size: its step's FLOP/s, and what its attention costs.

Part of ``rlax bench scale``. An embedded run at 1,024 new tokens spends two thirds of
each step generating; these parts time the trainer's step on its own, on a batch of the
run's shape (2 prompts of 64 tokens × 4 completions of ``tokens`` tokens, random
tokens, full length), so its efficiency can be read without a multi-hour run:

* the training step's FLOP/s (XLA's cost analysis of the compiled micro-steps, remat's
  recomputation and every chunk of the LM head included), the best of two steps after
  a compiling one, beside the machine's fp32 matrix-product rate measured in the same
  process right after;
* one layer's attention, forward and backward, by causal query blocks (what the model
  runs) beside the same arithmetic over the whole square of slots.
"""

from __future__ import annotations

import time

import numpy as np

from rlax_core.bench import Bench
from rlax_core.models import init_model
from rlax_core.models.qwen.config import QwenConfig

PROMPTS, SAMPLES, PROMPT_TOKENS = 2, 4, 64


def _batch(config: QwenConfig, tokens: int):
    """A step's batch of the embedded run's shape: random tokens, rewards 0 and 1."""
    from rlax_core.rl.algorithms.batch import build_batch
    from rlax_core.types import Rollout, RolloutGroup

    rng = np.random.default_rng(0)
    groups = []
    for g in range(PROMPTS):
        rollouts = tuple(
            Rollout(rollout_id=f"g{g}/{j}",
                    completion_tokens=tuple(rng.integers(0, config.vocab_size, tokens).tolist()),
                    behaviour_logprobs=(-1.0,) * tokens, policy_logprobs=(-1.0,) * tokens,
                    finish_reason="length", reward=float(j % 2))
            for j in range(SAMPLES)
        )  # fmt: skip
        prompt = tuple(rng.integers(0, config.vocab_size, PROMPT_TOKENS).tolist())
        group = RolloutGroup(group_id=f"g{g}", prompt_id=f"p{g}", prompt_tokens=prompt,
                             policy_version=0, worker_id="bench", rollouts=rollouts)  # fmt: skip
        groups.append(group)
    return build_batch(groups, advantage="grpo")[0]


def record_trainer(
    bench: Bench, config: QwenConfig, tokens: int, micro_batch_tokens: int, matmul_rate
) -> None:
    """The trainer's step alone: FLOP/s beside ``matmul_rate()`` of the same process."""
    from rlax_core.config.sections import AlgorithmSection, TrainerSection
    from rlax_core.rl.roles.learner import Learner

    trainer = TrainerSection(total_steps=3, learning_rate=1e-6,
                             micro_batch_tokens=micro_batch_tokens)  # fmt: skip
    learner = Learner(init_model(config, seed=0), trainer=trainer, algorithm=AlgorithmSection(),
                      temperature=1.0, max_new_tokens=tokens)  # fmt: skip
    batch = _batch(config, tokens)
    times = []
    for _ in range(3):  # the first compiles
        started = time.perf_counter()
        learner.train_step(batch, version=0)
        times.append(time.perf_counter() - started)
    best = min(times[1:])
    label = f"trainer alone, {config.param_dtype} {tokens} tokens"
    bench.record(
        f"{label}: FLOP/s", subject=learner.step_flops / best, baseline=matmul_rate(),
        unit="FLOP/s", higher_is_better=True,
        baseline_label="fp32 matrix product (2048 × 896 × 4864)",
    )  # fmt: skip
    bench.notes[label] = {"step_s": times, "step_flops": learner.step_flops,
                          "micro_batch_tokens": micro_batch_tokens,
                          "sequences": PROMPTS * SAMPLES}  # fmt: skip


def record_attention(bench: Bench, config: QwenConfig, tokens: int, rows: int) -> None:
    """One layer's attention at the trainer's micro-batch, blocks beside the whole square."""
    import jax
    import jax.numpy as jnp

    from rlax_core.models.qwen.sequence_attention import attend_causal

    t = PROMPT_TOKENS + tokens
    groups = config.num_heads // config.num_kv_heads
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (rows, t, config.num_kv_heads, groups, config.head_dim))
    k, v = (jax.random.normal(key, (rows, config.num_kv_heads, t, config.head_dim))
            for key in keys[1:3])  # fmt: skip
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (rows, t, t))
    weights = jax.random.normal(keys[3], q.shape)

    def seconds(first_slot: int | None) -> float:
        def loss(q, k, v):
            out = attend_causal(q, k, v, mask, config.head_dim**-0.5, first_slot)
            return (out * weights).sum()

        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        jax.block_until_ready(step(q, k, v))
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            jax.block_until_ready(step(q, k, v))
            best = min(best, time.perf_counter() - started)
        return best

    bench.record(
        f"one layer's attention, forward and backward, {rows} × {t} tokens (s)",
        subject=seconds(0), baseline=seconds(None), unit="s", higher_is_better=False,
        subject_label="causal query blocks", baseline_label="the whole square of slots",
    )  # fmt: skip


__all__ = ["record_attention", "record_trainer"]
