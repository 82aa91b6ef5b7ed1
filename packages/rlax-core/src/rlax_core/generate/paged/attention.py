"""Attention over a paged KV cache, in plain JAX, so that it runs on every backend.

Keys and values live in a pool of blocks, ``(num_blocks, kv_heads, block_size,
head_dim)`` per layer, and each row (a sequence) names its blocks in a block table.
A query sees the keys of its own row at positions up to its own (and, where a row
packs several histories side by side, from its own history's first position on).

The pool is read as a ragged list of (row, block) pairs: each row's blocks up to its
furthest query, one row after another. A loop with a traced trip count takes a fixed
number of pairs per trip, and an online softmax folds each trip's scores into its
rows' sums. So compute and reads follow the tokens in flight (the sum of the rows'
contexts), not rows × the longest context, and no shape depends on the lengths.

A trip is computed in one of two ways, by the shape of the call:

* **many rows** (the decode step: one query per sequence): as many pairs per trip as
  there are rows, each pair scored against its own row's queries only. The products
  are broadcast and summed over the small axes: per pair they are a (groups ×
  head_dim) by (head_dim × block) product, too small for a matmul routine, and the
  fused form ran several times faster than batched matmuls on the CPU;
* **one row** (a prompt's prefill chunk: many queries of one sequence): a tile of
  ``TILE_KEYS`` keys per trip, every query against every key in two matmuls per head,
  as flash attention does; no pair belongs to another row, so nothing is wasted.

The arithmetic is the trainer's (see :class:`rlax_core.models.qwen.layers.Attention`):
fp32 scores of the queries and keys, an fp32 softmax, fp32 probabilities times the
values, one rounding at the end, so the sampler's log-probabilities match the
trainer's teacher-forced ones up to accumulation order. (The order in which a row's
blocks are summed depends on where its pairs fall among the trips, so it can differ by
a rounding with the other rows in flight, as a matmul's can with the batch size.)

This function is the engine's seam for a kernel: anything with its signature can
replace it. :mod:`rlax_core.generate.paged.ragged_kernel` puts Pallas's ragged paged
attention kernel (TPU) there (``rollout.engine.attention: pallas``).
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp

TILE_KEYS = 128  # keys per trip when one row's queries are read in tiles


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
        *,
        starts: jax.Array | None = None,
    ) -> jax.Array: ...


def paged_attention(
    q: jax.Array,
    k_pool: jax.Array,
    v_pool: jax.Array,
    block_tables: jax.Array,
    positions: jax.Array,
    scale: float,
    *,
    starts: jax.Array | None = None,
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
        starts: (rows, queries) int32, the first position each query sees (None: 0, and
            no bound is computed), so that one row may hold several histories' tables
            side by side.

    Returns:
        (rows, queries, kv_heads, groups, head_dim) in ``q``'s dtype.
    """
    q, k_pool, v_pool, block_tables, positions = map(
        jnp.asarray, (q, k_pool, v_pool, block_tables, positions)
    )
    starts = None if starts is None else jnp.asarray(starts)
    rows, queries, heads, groups, dim = q.shape
    block = k_pool.shape[2]
    pairs, count = _pairs(block_tables, positions, block)
    if rows == 1:
        per_trip, trip = max(1, TILE_KEYS // block), _tile_trip
    else:
        per_trip, trip = rows, _pairs_trip
    keys = (k_pool, v_pool)
    # Whole trips past the last pair, padded with the last (the rows stay sorted).
    padded = -(-pairs[0].shape[0] // per_trip) * per_trip
    pairs = tuple(jnp.pad(a, (0, padded - a.shape[0]), mode="edge") for a in pairs)

    def add_trip(index: jax.Array, carry: tuple) -> tuple:
        row, column, ids = (jax.lax.dynamic_slice_in_dim(a, index * per_trip, per_trip)
                            for a in pairs)  # fmt: skip
        real = index * per_trip + jnp.arange(per_trip) < count
        return trip(q, keys, (starts, positions), scale, row, column, ids, real, carry)

    shape = (rows, queries, heads, groups)
    init = (
        jnp.full(shape, -jnp.inf, jnp.float32),
        jnp.zeros(shape, jnp.float32),
        jnp.zeros((*shape, dim), jnp.float32),
    )
    trips = (count + per_trip - 1) // per_trip  # 0 when every query is padding
    _, total, weighted = jax.lax.fori_loop(0, trips, add_trip, init)
    return (weighted / jnp.where(total > 0, total, 1.0)[..., None]).astype(q.dtype)


def _pairs(block_tables: jax.Array, positions: jax.Array, block: int) -> tuple:
    """Every (row, column, block) a query sees, row after row, padded to the table's
    size; and how many there are."""
    rows, columns = block_tables.shape
    furthest = jnp.max(positions, axis=1)
    counts = jnp.where(furthest >= 0, furthest // block + 1, 0)  # blocks each row sees
    ends = jnp.cumsum(counts)  # one past each row's last pair
    pair = jnp.arange(rows * columns)
    row = jnp.minimum(jnp.searchsorted(ends, pair, side="right", method="compare_all"), rows - 1)
    column = jnp.clip(pair - (ends - counts)[row], 0, columns - 1)
    return (row, column, block_tables[row, column]), ends[-1]


def _fold(carry: tuple, new_top: jax.Array, add) -> tuple:
    """One online-softmax step: ``add(shift)`` gives the trip's (probability sums,
    weighted values) against the new running maxima."""
    top, total, weighted = carry
    shift = jnp.where(jnp.isneginf(new_top), 0.0, new_top)  # nothing seen yet: stay 0
    rescale = jnp.exp(top - shift)
    sums, values = add(shift)
    return new_top, total * rescale + sums, weighted * rescale[..., None] + values


def _pairs_trip(q, keys, bounds, scale, row, column, ids, real, carry) -> tuple:
    """A trip of pairs from many rows, each against its own row's queries."""
    starts, positions = bounds
    rows = q.shape[0]
    block = keys[0].shape[2]
    kb, vb = (pool[ids].astype(jnp.float32) for pool in keys)  # (pairs, kv_heads, block, dim)
    key_positions = column[:, None] * block + jnp.arange(block)
    seen = real[:, None, None] & (key_positions[:, None] <= positions[row][..., None])
    if starts is not None:
        seen &= key_positions[:, None] >= starts[row][..., None]
    seen = seen[:, :, None, None, :]  # (pairs, queries, 1, 1, block)
    scores = jnp.sum(q.astype(jnp.float32)[row][..., None, :] * kb[:, None, :, None], -1) * scale
    pair_top = jnp.max(jnp.where(seen, scores, -jnp.inf), axis=-1)
    new_top = jnp.maximum(carry[0], _per_row(jax.ops.segment_max, pair_top, row, rows))

    def add(shift: jax.Array) -> tuple:
        probs = jnp.where(seen, jnp.exp(scores - shift[row][..., None]), 0.0)
        values = jnp.sum(probs[..., None] * vb[:, None, :, None], axis=-2)
        return (_per_row(jax.ops.segment_sum, jnp.sum(probs, -1), row, rows),
                _per_row(jax.ops.segment_sum, values, row, rows))  # fmt: skip

    return _fold(carry, new_top, add)


def _tile_trip(q, keys, bounds, scale, row, column, ids, real, carry) -> tuple:
    """A tile of one row's blocks, every query against every key: two matmuls per
    head, the queries and their groups side by side (the row's axis is 1)."""
    starts, positions = bounds
    _, queries, heads, groups, dim = q.shape
    block = keys[0].shape[2]
    tile = ids.shape[0] * block
    kb, vb = (jnp.swapaxes(pool[ids], 0, 1).reshape(heads, tile, dim).astype(jnp.float32)
              for pool in keys)  # fmt: skip
    qh = jnp.transpose(q[0].astype(jnp.float32), (1, 0, 2, 3)).reshape(heads, -1, dim)
    key_positions = (column[:, None] * block + jnp.arange(block)).reshape(-1)
    seen = jnp.repeat(real, block) & (key_positions <= positions[0][:, None])  # (queries, keys)
    if starts is not None:
        seen &= key_positions >= starts[0][:, None]
    seen = jnp.repeat(seen, groups, axis=0)[None]  # (1, queries × groups, keys)
    scores = jnp.einsum("hnd,hsd->hns", qh, kb) * scale
    as_carry = lambda a: jnp.moveaxis(a.reshape(heads, queries, groups, *a.shape[2:]), 0, 1)[None]  # noqa: E731
    new_top = jnp.maximum(carry[0], as_carry(jnp.max(jnp.where(seen, scores, -jnp.inf), -1)))

    def add(shift: jax.Array) -> tuple:
        flat = jnp.moveaxis(shift[0], 1, 0).reshape(heads, -1)
        probs = jnp.where(seen, jnp.exp(scores - flat[..., None]), 0.0)
        return as_carry(jnp.sum(probs, -1)), as_carry(jnp.einsum("hns,hsd->hnd", probs, vb))

    return _fold(carry, new_top, add)


def _per_row(segment_op, values: jax.Array, row: jax.Array, rows: int) -> jax.Array:
    """``segment_op`` (a max or a sum) of the pairs' ``values`` into their rows."""
    return segment_op(values, row, num_segments=rows, indices_are_sorted=True)
