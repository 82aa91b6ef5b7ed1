"""Log-probabilities of given tokens under a model: the trainer's side of the parity.

The sampler reports, for every token it draws, the log-probability under the
untruncated policy ``softmax(logits / T)``. The trainer recomputes the same quantity by
teacher forcing with :func:`teacher_forced_logprobs`; both go through
:func:`policy_log_softmax`, and a test holds them within 1e-5 in fp32.

A trainer needs them at every completion token, with gradients: the logits of a batch
of long completions over a 152K vocabulary are gigabytes (8 × 1,024 positions × 151,936
× 4 bytes = 5 GB, and the backward pass needs as much again).
:func:`token_logprobs_and_entropy` applies the LM head a chunk of positions at a time,
each chunk rematerialised in the backward pass, so only one chunk's logits are alive.
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
    model: Qwen,
    tokens: jax.Array,
    valid: jax.Array | None = None,
    temperature: float = 1.0,
    *,
    chunk: int = 512,
) -> jax.Array:
    """``log p(tokens[:, t + 1] | tokens[:, : t + 1])`` for every t: shape (batch, length - 1).

    The LM head runs ``chunk`` positions at a time (:func:`token_logprobs_and_entropy`):
    whole, a 152K vocabulary's logits for 4 rows of 1,100 tokens would be 2.7 GB.

    Args:
        model: the policy.
        tokens: (batch, length) prompt followed by completion, int32.
        valid: (batch, length) bool, False at padding (left or right).
        temperature: the sampling temperature the completions were drawn with.
        chunk: positions per piece of the LM head.
    """
    hidden = model(tokens, valid, head=False).final_hidden[:, :-1]
    return token_logprobs_and_entropy(model, hidden, tokens[:, 1:], temperature, chunk=chunk)[0]


def token_logprobs_and_entropy(
    model: Qwen,
    hidden: jax.Array,
    targets: jax.Array,
    temperature: jax.Array | float,
    *,
    chunk: int,
    entropy_gradient: bool = False,
    unrolled: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Log-probability of each target and the policy's entropy, ``chunk`` positions at a time.

    Equal to computing ``policy_log_softmax(model.logits_from_hidden(hidden), T)`` whole
    (and their gradients), with one chunk's logits in memory instead of all of them.

    Args:
        model: the policy (its LM head).
        hidden: (..., hidden) final-norm output at the positions (``head=False``).
        targets: (...) int token ids, one per position.
        temperature: the sampling temperature.
        chunk: positions per piece of the LM head.
        entropy_gradient: let gradients flow through the entropy (an entropy bonus);
            otherwise it is a metric only.
        unrolled: one copy of the piece per chunk instead of a loop over them, for a
            program whose FLOPs are counted, not run: XLA's cost analysis counts a
            loop's body once, whatever its trip count.

    Returns:
        Per position: the target's log-probability and the entropy, both fp32.
    """
    shape = targets.shape
    flat = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1)
    chunk = max(1, min(chunk, flat.shape[0]))
    pad = -flat.shape[0] % chunk
    flat = jnp.pad(flat, ((0, pad), (0, 0))).reshape(-1, chunk, flat.shape[-1])
    flat_targets = jnp.pad(flat_targets, (0, pad)).reshape(-1, chunk)
    weight = model.head_weight()

    @jax.checkpoint
    def piece(weight: jax.Array, h: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        log_probs = policy_log_softmax(model.logits_from_hidden(h[None], weight)[0], temperature)
        logp = jnp.take_along_axis(log_probs, t[:, None], axis=-1)[:, 0]
        if not entropy_gradient:
            log_probs = jax.lax.stop_gradient(log_probs)
        return logp, -(jnp.exp(log_probs) * log_probs).sum(axis=-1)

    if unrolled:
        pieces = [piece(weight, h, t) for h, t in zip(flat, flat_targets, strict=True)]
        logp, entropy = (jnp.stack(values) for values in zip(*pieces, strict=True))
    else:
        logp, entropy = jax.lax.map(lambda xs: piece(weight, *xs), (flat, flat_targets))
    size = targets.size
    return logp.reshape(-1)[:size].reshape(shape), entropy.reshape(-1)[:size].reshape(shape)
