"""Log-probabilities of given tokens under a model: the trainer's side of the parity.

The sampler reports, for every token it draws, the log-probability under the
untruncated policy ``softmax(logits / T)``. The trainer recomputes the same quantity by
teacher forcing with :func:`teacher_forced_logprobs`: the same fp32 logits, and a
log-sum-exp over the vocabulary's slices that equals the sampler's
:func:`policy_log_softmax` up to the order of its sums; a test holds them within 1e-5
in fp32.

A trainer needs them at every completion token, with gradients: the logits of a batch
of long completions over a 152K vocabulary are gigabytes (8 × 1,024 positions × 151,936
× 4 bytes = 5 GB, and the backward pass needs as much again).
:func:`token_logprobs_and_entropy` applies the LM head a slice of the vocabulary at a
time, with an online log-sum-exp over the slices (as the "cut cross-entropy" and Liger
kernels do), and a backward pass of its own that recomputes each slice's logits: only
one slice's logits are alive, and each slice's rows of the weight gradient are written
once. A rematerialised loop over chunks of positions instead adds every chunk's
vocabulary-sized weight gradient into a running sum, and keeps twice the memory: the
0.5B LM head's forward and backward over 2 × 1,024 positions took 21.3–21.5 s that
way on a 2-core CPU, 15.4–15.6 s this way (937 MB of temporaries against 455 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from rlax_core.models.qwen import Qwen
from rlax_core.models.qwen.model import head_logits


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

    The LM head holds ``chunk`` positions' worth of logits at a time
    (:func:`token_logprobs_and_entropy`): whole, a 152K vocabulary's logits for 4 rows of
    1,100 tokens would be 2.7 GB.

    Args:
        model: the policy.
        tokens: (batch, length) prompt followed by completion, int32.
        valid: (batch, length) bool, False at padding (left or right).
        temperature: the sampling temperature the completions were drawn with.
        chunk: the LM head's memory bound, in positions' worth of logits.
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
    """Log-probability of each target and the policy's entropy, a vocabulary slice at a time.

    Equal to computing ``policy_log_softmax(model.logits_from_hidden(hidden), T)`` whole
    (and their gradients) up to the order of the sums, with as many logits in memory at
    once as ``chunk`` positions over the whole vocabulary would have.

    Args:
        model: the policy (its LM head).
        hidden: (..., hidden) final-norm output at the positions (``head=False``).
        targets: (...) int token ids, one per position.
        temperature: the sampling temperature.
        chunk: the memory bound, in positions' worth of logits: the vocabulary is taken
            in slices of about ``vocab × chunk / positions`` entries.
        entropy_gradient: let gradients flow through the entropy (an entropy bonus);
            otherwise it is a metric only.
        unrolled: one copy of the slice's code per slice instead of a loop over them,
            for a program whose FLOPs are counted, not run: XLA's cost analysis counts a
            loop's body once, whatever its trip count.

    Returns:
        Per position: the target's log-probability and the entropy, both fp32.
    """
    shape = targets.shape
    flat = hidden.reshape(-1, hidden.shape[-1])
    weight = model.head_weight()
    temperature = jnp.asarray(temperature, jnp.float32)
    scale = jnp.where(temperature > 0, temperature, 1.0)
    pieces = _Pieces.of(weight.shape[0], flat.shape[0], chunk, jnp.dtype(model.config.dtype))
    logp, entropy = _head(
        pieces, entropy_gradient, unrolled, weight, flat, targets.reshape(-1), scale
    )
    if not entropy_gradient:
        entropy = jax.lax.stop_gradient(entropy)
    return logp.reshape(shape), entropy.reshape(shape)


@dataclass(frozen=True)
class _Pieces:
    """The vocabulary's slices: ``count`` of them, ``width`` entries each, slice ``j``
    holding the ids ``j, j + count, j + 2·count, …``.

    Interleaved rather than contiguous: a weight split over devices by vocabulary rows
    (tensor parallelism) gives every device its share of every slice, so a slice is
    taken without moving rows between devices. ``count`` divides the vocabulary.
    """

    count: int
    width: int
    dtype: jnp.dtype

    @classmethod
    def of(cls, vocab: int, positions: int, chunk: int, dtype: jnp.dtype) -> _Pieces:
        wanted = min(vocab, -(-positions // max(1, chunk)))
        count = next(n for n in range(max(1, wanted), vocab + 1) if vocab % n == 0)
        return cls(count, vocab // count, dtype)

    def rows(self, weight: jax.Array, j) -> jax.Array:
        """Slice ``j``'s rows of a (vocab, hidden) weight: (width, hidden)."""
        return jax.lax.dynamic_index_in_dim(
            weight.reshape(self.width, self.count, -1), j, axis=1, keepdims=False
        )

    def logits(self, rows: jax.Array, h: jax.Array, scale: jax.Array) -> jax.Array:
        """A slice's scaled fp32 logits (positions, width)."""
        return head_logits(h, rows, self.dtype) / scale

    def loop(self, unrolled: bool, body, carry):
        if unrolled:
            for j in range(self.count):
                carry = body(j, carry)
            return carry
        return jax.lax.fori_loop(0, self.count, body, carry)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _head(
    pieces: _Pieces,
    entropy_gradient: bool,
    unrolled: bool,
    weight: jax.Array,
    h: jax.Array,
    targets: jax.Array,
    scale: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    return _head_forward(pieces, entropy_gradient, unrolled, weight, h, targets, scale)[0]


def _head_forward(pieces, entropy_gradient, unrolled, weight, h, targets, scale):
    """One pass over the slices: the running maximum ``m``, ``Σ e^(z - m)``, ``Σ e^(z - m) z``
    and the target's logit ``z_t``; log p = z_t - lse, entropy = lse - Σ p z."""

    def body(j, carry):
        m, total, moment, picked = carry
        z = pieces.logits(pieces.rows(weight, j), h, scale)
        new_m = jnp.maximum(m, z.max(axis=-1))
        e = jnp.exp(z - new_m[:, None])
        shift = jnp.exp(m - new_m)
        total = total * shift + e.sum(axis=-1)
        moment = moment * shift + (e * z).sum(axis=-1)
        got = jnp.take_along_axis(z, (targets // pieces.count)[:, None], axis=-1)[:, 0]
        return new_m, total, moment, jnp.where(targets % pieces.count == j, got, picked)

    zero = jnp.zeros(targets.shape, jnp.float32)
    m, total, moment, picked = pieces.loop(unrolled, body, (zero - jnp.inf, zero, zero, zero))
    lse = m + jnp.log(total)
    entropy = lse - moment / total
    return (picked - lse, entropy), (weight, h, targets, scale, lse, entropy)


def _head_backward(pieces, entropy_gradient, unrolled, residuals, grads):
    """Each slice's logits again, their gradient ``g (onehot - p)`` (and the entropy's,
    ``-g_H p (log p + H)``, when it has one), the slice's rows of the weight gradient and
    its share of the hidden states' gradient."""
    weight, h, targets, scale, lse, entropy = residuals
    g_logp, g_entropy = grads
    dtype = pieces.dtype

    def body(j, carry):
        d_weight, d_h = carry
        rows = pieces.rows(weight, j)
        log_p = pieces.logits(rows, h, scale) - lse[:, None]
        prob = jnp.exp(log_p)
        ids = jnp.arange(pieces.width) * pieces.count + j
        d_z = g_logp[:, None] * ((ids[None, :] == targets[:, None]) - prob)
        if entropy_gradient:
            d_z = d_z - g_entropy[:, None] * prob * (log_p + entropy[:, None])
        d_logits = (d_z / scale).astype(dtype)
        d_rows = jnp.einsum("pv,ph->vh", d_logits, h.astype(dtype),
                            preferred_element_type=jnp.float32)  # fmt: skip
        d_weight = jax.lax.dynamic_update_index_in_dim(
            d_weight, d_rows.astype(d_weight.dtype), j, axis=1
        )
        d_h = d_h + jnp.einsum("pv,vh->ph", d_logits, rows.astype(dtype),
                               preferred_element_type=jnp.float32)  # fmt: skip
        return d_weight, d_h

    carry = (jnp.zeros((pieces.width, pieces.count, weight.shape[1]), weight.dtype),
             jnp.zeros(h.shape, jnp.float32))  # fmt: skip
    d_weight, d_h = pieces.loop(unrolled, body, carry)
    d_targets = np.zeros(targets.shape, jax.dtypes.float0)
    return d_weight.reshape(weight.shape), d_h.astype(h.dtype), d_targets, jnp.zeros_like(scale)


_head.defvjp(_head_forward, _head_backward)
