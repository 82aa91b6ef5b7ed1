"""Policy losses, registered by name, with the off-policy correction and loss aggregation.

Notation, per completion token t of sequence i (arrays of shape (sequences, tokens)):

* ``logp`` — log π_θ(y_t), the policy being optimised (gradients flow here).
* ``prox`` — log π_prox(y_t), the *proximal* policy: the trainer's own recomputation with
  the weights at the start of the step (no gradient).
* ``behav`` — log μ(y_t), the *behaviour* policy that produced the token on a worker,
  possibly several versions old.
* ``A_i`` — the sequence's advantage.

Decoupled off-policy correction (AReaL's decoupled PPO): the trust region is taken
around π_prox with ``r = π_θ / π_prox``, and staleness is corrected by a truncated
importance weight ``w = min(π_prox / μ, cap)`` (no gradient). Stale rollouts are thus
re-weighted, not merely clipped.

Aggregation of per-token values ``ℓ_{i,t}`` under the completion mask:

* ``token`` — ``Σ_{i,t} ℓ / Σ_{i,t} 1`` (DAPO);
* ``sequence`` — ``mean_i (Σ_t ℓ_{i,t} / |y_i|)`` (GRPO);
* ``fixed_length`` — ``Σ_{i,t} ℓ / (N · T_max)`` (Dr. GRPO: no length normalisation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


@dataclass(frozen=True)
class LossConfig:
    """The static settings of the objective (see the run config's ``algorithm`` section)."""

    loss: str = "ppo_clip"
    aggregation: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.28
    importance_ratio_cap: float = 2.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    max_new_tokens: int = 1


def normalizers(mask: Array, max_new_tokens: int) -> dict[str, Array]:
    """The denominators of the three aggregations for a (whole) batch's mask.

    A batch split into micro-batches passes the whole batch's normalizers to each, so the
    micro-batch losses (and their gradients) sum to exactly the whole batch's. A NumPy
    mask (the trainer's host batch) is counted with NumPy: no device round trips.
    """
    xp = np if isinstance(mask, np.ndarray) else jnp
    return {
        "token": xp.maximum(mask.sum(), 1).astype(xp.float32),
        "sequence": xp.maximum(mask.any(axis=1).sum(), 1).astype(xp.float32),
        "fixed_length": xp.float32(mask.shape[0] * max_new_tokens),
    }


def aggregate(
    values: Array,
    mask: Array,
    mode: str,
    max_new_tokens: int = 1,
    normalizer: Array | None = None,
) -> Array:
    """Reduces per-token values to a scalar (see the module docstring).

    Args:
        normalizer: the denominator to use instead of this batch's own (see
            :func:`normalizers`).
    """
    if mode not in ("token", "sequence", "fixed_length"):
        raise ValueError(f"unknown aggregation {mode!r}; use token, sequence or fixed_length")
    if normalizer is None:
        normalizer = normalizers(mask, max_new_tokens)[mode]
    mask = mask.astype(values.dtype)
    if mode == "sequence":
        lengths = mask.sum(axis=1)
        return ((values * mask).sum(axis=1) / jnp.maximum(lengths, 1.0)).sum() / normalizer
    return (values * mask).sum() / normalizer


def importance_weights(prox: Array, behav: Array, cap: float) -> Array:
    """Truncated per-token importance weights ``min(π_prox / μ, cap)`` (no gradient)."""
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(prox - behav), cap))


def ppo_clip(
    logp: Array, prox: Array, behav: Array, advantages: Array, mask: Array, cfg: LossConfig
) -> tuple:
    """PPO-clip with asymmetric bounds (DAPO clip-higher), decoupled from the behaviour:

    ``ℓ = −w · min(r A, clip(r, 1 − ε_low, 1 + ε_high) A)``, ``r = exp(logp − prox)``.

    Every loss takes (logp, prox, behav, advantages, mask, cfg) and returns the
    (per-token loss, per-token "clipped" flags, per-token weights); the caller aggregates.
    """
    del mask  # token-level: the caller's aggregation applies it
    ratio = jnp.exp(logp - jax.lax.stop_gradient(prox))
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * adv
    weights = importance_weights(prox, behav, cfg.importance_ratio_cap)
    return -weights * jnp.minimum(unclipped, clipped), clipped < unclipped, weights


def gspo(
    logp: Array, prox: Array, behav: Array, advantages: Array, mask: Array, cfg: LossConfig
) -> tuple:
    """GSPO: one length-normalised ratio per sequence, ``s_i = exp(mean_t(logp − prox))``.

    Token form: ``s_{i,t} = sg(s_i) · exp(logp_t − sg(logp_t))`` (its value is ``s_i``,
    its gradient flows through every token), ``ℓ = −w_i · min(s A, clip(s) A)`` with the
    sequence-level weight ``w_i = min(exp(mean_t(prox − behav)), cap)``. Pair with the
    ``sequence`` aggregation, as the GSPO paper does.
    """
    lengths = jnp.maximum(mask.sum(axis=1, keepdims=True), 1)
    log_s = (jax.lax.stop_gradient(logp - prox)).sum(axis=1, keepdims=True) / lengths
    s = jnp.exp(log_s) * jnp.exp(logp - jax.lax.stop_gradient(logp))
    adv = advantages[:, None]
    unclipped = s * adv
    clipped = jnp.clip(s, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high) * adv
    log_w = jax.lax.stop_gradient((prox - behav).sum(axis=1, keepdims=True) / lengths)
    weights = jnp.broadcast_to(jnp.minimum(jnp.exp(log_w), cfg.importance_ratio_cap), logp.shape)
    return -weights * jnp.minimum(unclipped, clipped), clipped < unclipped, weights


def reinforce(
    logp: Array, prox: Array, behav: Array, advantages: Array, mask: Array, cfg: LossConfig
) -> tuple:
    """REINFORCE with the truncated off-policy weight: ``ℓ = −w · A · logp``."""
    del mask
    weights = importance_weights(prox, behav, cfg.importance_ratio_cap)
    return -weights * advantages[:, None] * logp, jnp.zeros(logp.shape, bool), weights


PolicyLoss = Callable[[Array, Array, Array, Array, Array, LossConfig], tuple]

POLICY_LOSSES: dict[str, PolicyLoss] = {"ppo_clip": ppo_clip, "gspo": gspo, "reinforce": reinforce}


def kl_estimate(logp: Array, ref: Array, estimator: str) -> Array:
    """Per-token KL(π_θ ‖ π_ref) estimates from samples of π_θ.

    ``k1 = logp − ref`` (unbiased, high variance); ``k3 = exp(ref − logp) − (ref − logp) − 1``
    (unbiased, low variance, never negative).
    """
    if estimator == "k1":
        return logp - ref
    if estimator == "k3":
        delta = ref - logp
        return jnp.exp(delta) - delta - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; use k1 or k3")


def policy_objective(
    logp: Array,
    prox: Array,
    behav: Array,
    advantages: Array,
    mask: Array,
    cfg: LossConfig,
    *,
    ref: Array | None = None,
    entropy: Array | None = None,
    batch_normalizers: dict[str, Array] | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The scalar loss to minimise and its parts.

    Args:
        logp, prox, behav: (sequences, tokens) log-probabilities (see module docstring).
        advantages: (sequences,).
        mask: (sequences, tokens) True on completion tokens that count.
        cfg: the objective's settings.
        ref: reference-model log-probabilities, for the KL penalty.
        entropy: per-token entropy of π_θ, for the entropy bonus.
        batch_normalizers: the whole batch's :func:`normalizers`, when this is one of its
            micro-batches; every value returned (loss and metrics, except maxima) then
            sums over the micro-batches to the whole batch's value.
    """
    # Masked positions may hold padding garbage: zero them so nothing leaks.
    zero = jnp.zeros_like(logp)
    logp, prox, behav = (jnp.where(mask, x, zero) for x in (logp, prox, behav))
    per_token, clipped, weights = POLICY_LOSSES[cfg.loss](logp, prox, behav, advantages, mask, cfg)
    norm = batch_normalizers or normalizers(mask, cfg.max_new_tokens)

    def agg(values: Array) -> Array:
        return aggregate(values, mask, cfg.aggregation, cfg.max_new_tokens, norm[cfg.aggregation])

    def token_mean(values: Array) -> Array:
        return aggregate(values, mask, "token", normalizer=norm["token"])

    policy_loss = agg(per_token)
    total = policy_loss
    metrics = {
        "loss/policy": policy_loss,
        "clip/fraction": token_mean(clipped.astype(jnp.float32)),
        "is_weight/mean": token_mean(weights),
        "is_weight/max": jnp.where(mask, weights, 0.0).max(),
        "is_weight/truncated_fraction": token_mean(
            (weights >= cfg.importance_ratio_cap).astype(jnp.float32)
        ),
    }
    if ref is not None:
        kl = kl_estimate(logp, jnp.where(mask, ref, zero), cfg.kl_estimator)
        metrics["kl/mean"] = token_mean(kl)
        total = total + cfg.kl_coef * agg(kl)
    if entropy is not None:
        metrics["entropy/mean"] = token_mean(entropy)
        total = total - cfg.entropy_coef * agg(entropy)
    metrics["loss/total"] = total
    return total, metrics
