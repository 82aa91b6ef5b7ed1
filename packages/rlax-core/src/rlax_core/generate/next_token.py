"""Choosing the next token: temperature, top-k, top-p, and the log-probabilities RL needs.

Two log-probabilities are returned per sampled token:

* **behaviour** — under the exact distribution the token was drawn from (temperature,
  then top-k and top-p truncation, renormalised). Greedy decoding draws from a point mass,
  so its behaviour log-probability is 0.
* **policy** — under the untruncated policy ``softmax(logits / T)`` (``T = 1`` when
  greedy). This is what the trainer recomputes by teacher forcing; the two must agree.

All knobs are traced values, so changing them never recompiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from rlax_core.models.logprobs import policy_log_softmax


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions.

    Attributes:
        max_new_tokens: most tokens generated per completion (a compile-time size).
        temperature: 0 is greedy.
        top_k: keep the k most likely tokens (0: off).
        top_p: keep the smallest set of tokens with this much probability (1: off).
        stop_token_ids: tokens that end a completion (kept as its last token).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be ≥ 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def truncate(log_probs: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Log-probabilities renormalised over the top-k / top-p set; others get -inf.

    Args:
        log_probs: (batch, vocab) normalised log-probabilities.
        top_k: int scalar, 0 for off.
        top_p: float scalar, 1 for off.
    """
    vocab = log_probs.shape[-1]

    def apply(lp: jax.Array) -> jax.Array:
        order = jnp.argsort(-lp, axis=-1)
        sorted_lp = jnp.take_along_axis(lp, order, axis=-1)
        rank = jnp.arange(vocab)
        keep_k = (top_k <= 0) | (rank < top_k)
        # Keep a token if the mass strictly before it is below top_p (the first always is).
        mass_before = jnp.cumsum(jnp.exp(sorted_lp), axis=-1) - jnp.exp(sorted_lp)
        keep_p = mass_before < top_p
        keep_sorted = keep_k[None, :] & keep_p
        keep = (
            jnp.zeros_like(keep_sorted).at[jnp.arange(lp.shape[0])[:, None], order].set(keep_sorted)
        )
        kept = jnp.where(keep, lp, -jnp.inf)
        return jax.nn.log_softmax(kept, axis=-1)

    # Sorting the vocabulary costs more than the rest of a decode step at small sizes:
    # skip it when no truncation is asked for.
    return jax.lax.cond((top_k > 0) | (top_p < 1.0), apply, lambda lp: lp, log_probs)


def draws(seeds: jax.Array, indices: jax.Array) -> jax.Array:
    """The uniform draw in [0, 1) for token ``indices`` of the samples seeded ``seeds``.

    A function of the seed and the token's index alone (broadcast over both): where a
    sample sits in a batch, which engine runs it, or when, changes none of its draws.
    """

    def one(seed: jax.Array, index: jax.Array) -> jax.Array:
        return jax.random.uniform(jax.random.fold_in(jax.random.key(seed), index))

    seeds, indices = jnp.broadcast_arrays(seeds, indices)
    flat = jax.vmap(one)(seeds.reshape(-1), indices.reshape(-1))
    return flat.reshape(seeds.shape)


_BLOCK = 256  # vocabulary entries per block of the two-level inverse CDF


def sample_rows(uniforms: jax.Array, log_probs: jax.Array) -> jax.Array:
    """One token per row of (batch, vocab) normalised log-probabilities.

    Inverse-CDF sampling with one uniform draw in [0, 1) per row, in two levels (blocks
    of the vocabulary, then the chosen block), instead of ``jax.random.categorical``'s
    Gumbel variate for every vocabulary entry: at a 32K vocabulary that draw costs more
    than a small model's whole decode step on a CPU. A token of probability zero is
    never drawn.

    Args:
        uniforms: (batch,) draws in [0, 1), one per row.
        log_probs: (batch, vocab).
    """
    batch, vocab = log_probs.shape
    probs = jnp.pad(jnp.exp(log_probs), ((0, 0), (0, (-vocab) % _BLOCK)))
    blocks = probs.reshape(batch, -1, _BLOCK)
    sums = blocks.sum(axis=-1)
    ends = jnp.cumsum(sums, axis=-1)
    # In (0, total]: a threshold of 0 would draw a leading token of probability zero.
    threshold = (1.0 - uniforms) * ends[:, -1]
    block = jnp.sum(ends < threshold[:, None], axis=-1)
    pick = lambda a: jnp.take_along_axis(a, block[:, None], axis=1)[:, 0]  # noqa: E731
    inner = jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0]
    within = (pick(ends) - pick(sums))[:, None] + jnp.cumsum(inner, axis=-1)
    index = jnp.sum(within < threshold[:, None], axis=-1)
    # Rounding may run past the block's last possible token: stop there.
    last = _BLOCK - 1 - jnp.argmax(inner[:, ::-1] > 0, axis=-1)
    return (block * _BLOCK + jnp.minimum(index, last)).astype(jnp.int32)


def greedy(logits: jax.Array) -> jax.Array:
    """The first most likely token of each row, as ``jnp.argmax`` picks it.

    Two plain reductions (the maximum, then the first index holding it) instead of
    ``argmax``'s paired value-and-index reduction, which XLA's CPU backend does not
    vectorise.
    """
    top = jnp.max(logits, axis=-1, keepdims=True)
    index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    return jnp.min(jnp.where(logits == top, index, logits.shape[-1]), axis=-1)


def choose(
    logits: jax.Array,
    uniforms: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Samples one token per row of (batch, vocab) logits, with one uniform draw per row.

    Returns:
        (tokens, behaviour_logprobs, policy_logprobs), each of shape (batch,).
    """
    policy = policy_log_softmax(logits, temperature)
    behaviour = truncate(policy, top_k, top_p)
    is_greedy = temperature <= 0
    # Greedy decoding skips the draw (a scalar predicate, so a real branch).
    tokens = jax.lax.cond(
        is_greedy, lambda: greedy(logits), lambda: sample_rows(uniforms, behaviour)
    ).astype(jnp.int32)
    pick = lambda lp: jnp.take_along_axis(lp, tokens[:, None], axis=-1)[:, 0]  # noqa: E731
    behaviour_lp = jnp.where(is_greedy, 0.0, pick(behaviour))
    return tokens, behaviour_lp, pick(policy)
