"""The optimiser: AdamW with warm-up, a constant or cosine schedule, and norm clipping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
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
        clip_by_global_norm(trainer.max_grad_norm),
        optax.adamw(
            learning_rate_schedule(trainer, total_updates),
            b1=trainer.adam_b1,
            b2=trainer.adam_b2,
            eps=trainer.adam_eps,
            weight_decay=trainer.weight_decay,
        ),
    )


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """``optax.clip_by_global_norm`` as one scale factor applied to every leaf.

    Optax chooses per leaf between the gradient and its clipped copy (``lax.select``), and
    XLA keeps that copy of every leaf alive through the whole update: temporaries of the
    parameters' size (1.84 GiB at 0.5B in fp32, by the compiled update's
    ``memory_analysis``). A factor of ``min(1, max_norm / norm)`` clips the same way and
    fuses into each leaf's AdamW update, so the update needs no temporary buffer. The
    state is optax's (empty), so checkpoints are unchanged.
    """

    def update(updates, state, params=None):
        del params
        norm = optax.tree.norm(updates)
        factor = jnp.where(norm < max_norm, 1.0, max_norm / norm)
        return jax.tree.map(lambda u: u * factor.astype(u.dtype), updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
