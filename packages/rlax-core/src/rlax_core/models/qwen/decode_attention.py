"""Attention of a decode step: one query per row, over the filled part of a KV cache.

A sampler sizes its cache for the whole generation budget (prompt plus max new tokens),
but at step ``s`` only the first ``prompt + s + 1`` slots can be visible. Attending over
every slot would make each step cost the full budget: with a 4K-token budget most of a
step would go to slots nothing has been written to yet. So the cache is read in blocks,
as many as the filled slots need (a loop with a traced trip count), and combined with an
online softmax: a running maximum, sum and weighted value per (row, head).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

BLOCK = 256  # cache slots per block


def attend_one_query(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    scale: float,
    filled: jax.Array | int,
) -> jax.Array:
    """Attention of one query per row to the first ``filled`` slots of a cache.

    Products and sums rather than matrix products: with one query per row, each (row,
    head) product is a matrix-vector product too small to gain from a matrix kernel,
    and the elementwise form fuses with the mask and the softmax.

    Args:
        q: (batch, kv_heads, groups, head_dim).
        k, v: (batch, kv_heads, slots, head_dim), heads-first as the cache holds them.
        mask: (batch, slots) bool, True where the query may see the slot. Slots at or
            past ``filled`` must be False.
        scale: the score scale.
        filled: how many leading slots may hold visible keys.

    Returns:
        (batch, kv_heads, groups, head_dim).
    """
    slots = k.shape[2]
    block = min(BLOCK, slots)
    q32 = q.astype(jnp.float32)

    def add_block(i: jax.Array, carry: tuple) -> tuple:
        top, total, weighted = carry
        # The last block may start early so that it fits in the cache; slots an earlier
        # block has counted are masked out of it.
        start = jnp.minimum(i * block, slots - block)
        index = start + jnp.arange(block)
        kb = jax.lax.dynamic_slice_in_dim(k, start, block, axis=2)
        vb = jax.lax.dynamic_slice_in_dim(v, start, block, axis=2)
        seen = jax.lax.dynamic_slice_in_dim(mask, start, block, axis=1) & (index >= i * block)
        seen = seen[:, None, None, :]
        scores = jnp.sum(q32[:, :, :, None, :] * kb[:, :, None], axis=-1) * scale  # b k g s
        new_top = jnp.maximum(top, jnp.max(jnp.where(seen, scores, -jnp.inf), axis=-1))
        # A row may see nothing yet (left padding fills whole blocks): keep it at zero.
        shift = jnp.where(jnp.isneginf(new_top), 0.0, new_top)
        probs = jnp.where(seen, jnp.exp(scores - shift[..., None]), 0.0)
        rescale = jnp.exp(top - shift)
        total = total * rescale + jnp.sum(probs, axis=-1)
        weighted = weighted * rescale[..., None] + jnp.sum(
            probs[..., None] * vb[:, :, None], axis=3
        )
        return new_top, total, weighted

    b, heads, groups, dim = q.shape
    init = (
        jnp.full((b, heads, groups), -jnp.inf, jnp.float32),
        jnp.zeros((b, heads, groups), jnp.float32),
        jnp.zeros((b, heads, groups, dim), jnp.float32),
    )
    blocks = (filled + block - 1) // block
    _, total, weighted = jax.lax.fori_loop(0, blocks, add_block, init)
    # A row that sees no slot (a caller's idle row) gets zeros, not 0 / 0.
    return (weighted / jnp.where(total > 0, total, 1.0)[..., None]).astype(q.dtype)
