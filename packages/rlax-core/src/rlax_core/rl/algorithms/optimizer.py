"""The optimiser: AdamW with warm-up, a constant or cosine schedule, and norm clipping."""

from __future__ import annotations

import optax

from rlax_core.config.sections import TrainerSection


def learning_rate_schedule(
    trainer: TrainerSection, total_steps: int | None = None
) -> optax.Schedule:
    """Linear warm-up from 0 to ``learning_rate`` over ``warmup_steps``, then constant or
    cosine decay to 0 at ``total_steps`` (optimizer updates, not RL steps)."""
    total = total_steps if total_steps is not None else trainer.total_steps
    warmup = min(trainer.warmup_steps, max(total - 1, 0))
    if trainer.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(
            0.0, trainer.learning_rate, max(warmup, 1) if warmup else 0, max(total, warmup + 1)
        )
    if warmup == 0:
        return optax.constant_schedule(trainer.learning_rate)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, trainer.learning_rate, warmup),
         optax.constant_schedule(trainer.learning_rate)],
        [warmup],
    )  # fmt: skip


def make_optimizer(
    trainer: TrainerSection, total_updates: int | None = None
) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with the schedule."""
    return optax.chain(
        optax.clip_by_global_norm(trainer.max_grad_norm),
        optax.adamw(
            learning_rate_schedule(trainer, total_updates),
            b1=trainer.adam_b1,
            b2=trainer.adam_b2,
            eps=trainer.adam_eps,
            weight_decay=trainer.weight_decay,
        ),
    )
