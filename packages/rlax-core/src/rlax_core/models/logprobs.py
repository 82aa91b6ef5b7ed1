"""Log-probabilities of given tokens under a model: the trainer's side of the parity.

The sampler reports, for every token it draws, the log-probability under the
untruncated policy ``softmax(logits / T)``. The trainer recomputes the same quantity by
teacher forcing with :func:`teacher_forced_logprobs`; both go through
:func:`policy_log_softmax`, and a test holds them within 1e-5 in fp32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlax_core.models.qwen import Qwen


def policy_log_softmax(logits: jax.Array, temperature: jax.Array | float) -> jax.Array:
    """Log-probabilities under ``softmax(logits / T)``, with ``T = 1`` when greedy (T = 0)."""
    temperature = jnp.asarray(temperature, jnp.float32)
    scale = jnp.where(temperature > 0, temperature, 1.0)
    return jax.nn.log_softmax(logits.astype(jnp.float32) / scale, axis=-1)


def teacher_forced_logprobs(
    model: Qwen, tokens: jax.Array, valid: jax.Array | None = None, temperature: float = 1.0
) -> jax.Array:
    """``log p(tokens[:, t + 1] | tokens[:, : t + 1])`` for every t: shape (batch, length - 1).

    Args:
        model: the policy.
        tokens: (batch, length) prompt followed by completion, int32.
        valid: (batch, length) bool, False at padding (left or right).
        temperature: the sampling temperature the completions were drawn with.
    """
    logits = model(tokens, valid).logits
    log_probs = policy_log_softmax(logits[:, :-1], temperature)
    return jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1)[..., 0]
