"""Attention over a paged KV cache, in plain JAX, so that it runs on every backend.

Keys and values live in a pool of blocks, ``(num_blocks, kv_heads, block_size,
head_dim)`` per layer, and each row (a sequence) names its blocks in a block table.
A query sees the keys of its own row at positions up to its own. The pool is read one
column of the block tables at a time, as many columns as the furthest query needs (a
loop with a traced trip count), and combined with an online softmax: compute and reads
follow the tokens in flight, not the table's length.

The arithmetic is the trainer's (see :class:`rlax_core.models.qwen.layers.Attention`):
fp32 scores of the queries and keys, an fp32 softmax, fp32 probabilities times the
values, one rounding at the end, so the sampler's log-probabilities match the
trainer's teacher-forced ones up to accumulation order.

This function is the engine's seam for a kernel: anything with its signature can
replace it (a Pallas ragged paged attention kernel on a TPU or a GPU reads the same
pool and tables).
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp


class PagedAttention(Protocol):
    """What the engine calls for each layer's attention (see :func:`paged_attention`)."""

    def __call__(
        self,
        q: jax.Array,
        k_pool: jax.Array,
        v_pool: jax.Array,
        block_tables: jax.Array,
        positions: jax.Array,
        scale: float,
    ) -> jax.Array: ...


def paged_attention(
    q: jax.Array,
    k_pool: jax.Array,
    v_pool: jax.Array,
    block_tables: jax.Array,
    positions: jax.Array,
    scale: float,
) -> jax.Array:
    """Each row's queries attending to its keys in the pool, causally by position.

    Args:
        q: (rows, queries, kv_heads, groups, head_dim).
        k_pool, v_pool: (num_blocks, kv_heads, block_size, head_dim), this layer's pool
            with the queries' own keys and values already written.
        block_tables: (rows, max_blocks) int32, each row's blocks in position order
            (padding entries may name any block: they are never seen).
        positions: (rows, queries) int32, each query's position; -1 for a padding query,
            which sees nothing and gets zeros.
        scale: the score scale.

    Returns:
        (rows, queries, kv_heads, groups, head_dim) in ``q``'s dtype.
    """
    rows, queries, heads, groups, dim = q.shape
    block = k_pool.shape[2]
    q32 = q.astype(jnp.float32)
    columns = (jnp.max(positions) + block) // block  # 0 when every query is padding

    def add_column(j: jax.Array, carry: tuple) -> tuple:
        top, total, weighted = carry
        ids = block_tables[:, j]
        kb = k_pool[ids].astype(jnp.float32)  # (rows, kv_heads, block, head_dim)
        vb = v_pool[ids].astype(jnp.float32)
        key_positions = j * block + jnp.arange(block)
        seen = (key_positions[None, None, :] <= positions[:, :, None])[:, :, None, None, :]
        scores = jnp.einsum("rqkgd,rksd->rqkgs", q32, kb) * scale
        new_top = jnp.maximum(top, jnp.max(jnp.where(seen, scores, -jnp.inf), axis=-1))
        shift = jnp.where(jnp.isneginf(new_top), 0.0, new_top)  # nothing seen yet: stay 0
        probs = jnp.where(seen, jnp.exp(scores - shift[..., None]), 0.0)
        rescale = jnp.exp(top - shift)
        total = total * rescale + jnp.sum(probs, axis=-1)
        weighted = weighted * rescale[..., None] + jnp.einsum("rqkgs,rksd->rqkgd", probs, vb)
        return new_top, total, weighted

    shape = (rows, queries, heads, groups)
    init = (
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros((*shape, dim), jnp.float32),
    )
    _, total, weighted = jax.lax.fori_loop(0, columns, add_column, init)
    return (weighted / jnp.where(total > 0, total, 1.0)[..., None]).astype(q.dtype)
