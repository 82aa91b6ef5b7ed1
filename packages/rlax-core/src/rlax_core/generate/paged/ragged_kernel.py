"""A ragged paged attention kernel behind the engine's attention seam.

The kernel is Pallas's ``ragged_paged_attention`` (``jax.experimental.pallas.ops.tpu``,
the one vLLM's TPU backend runs). Its contract differs from
:func:`~rlax_core.generate.paged.attention.paged_attention`'s in three ways, which
:func:`ragged_kernel_attention` bridges:

* **layout**: one pool of pages, ``(pages, page_size, 2 × kv_heads, head_dim)``, each
  head's keys and values interleaved; the engine keeps a key pool and a value pool,
  ``(blocks, kv_heads, block_size, head_dim)``, per layer;
* **lengths**: a sequence's keys are its first ``kv_len`` positions and its queries the
  last ``q_len`` of them; the engine gives each query's position (-1: a padding row);
* **rows**: the kernel's queries are tokens packed by ``cu_q_lens``; the engine's are
  ``(rows, queries)``.

Only the decode call (one query a row, one history a row) goes to the kernel; a prefill
chunk's call (one row packing several histories) stays with ``paged_attention``. The
adapter lays the pools out again on every call, a copy of the whole pool: the seam and
its numerics are tested here against the kernel's own reference
(``ref_ragged_paged_attention``, which runs on the CPU); a pool kept in the kernel's
layout would save the copy, and the speed is a TPU's to measure. With a kernel, turn
the engine's contiguous bursts off (``contiguous_bursts=False``): they read a copy of
their own and would bypass it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rlax_core.generate.paged.attention import PagedAttention, paged_attention


def ragged_kernel_attention(kernel: Callable[..., jax.Array] | None = None) -> PagedAttention:
    """The engine's paged attention (``Engine(attention=...)``) over ``kernel``, a ragged
    paged attention with Pallas's signature (None: Pallas's TPU kernel itself)."""
    if kernel is None:
        try:
            from jax.experimental.pallas.ops.tpu.ragged_paged_attention import (
                ragged_paged_attention,
            )
        except ImportError as exc:  # an older jax
            raise ImportError(
                "this jax has no jax.experimental.pallas.ops.tpu.ragged_paged_attention: "
                "upgrade jax, or keep the engine's default attention"
            ) from exc
        kernel = ragged_paged_attention

    def attention(
        q: jax.Array,
        k_pool: jax.Array,
        v_pool: jax.Array,
        block_tables: jax.Array,
        positions: jax.Array,
        scale: float,
        *,
        starts: jax.Array | None = None,
    ) -> jax.Array:
        rows, queries, heads, groups, dim = q.shape
        if queries != 1 or starts is not None:  # a prefill chunk: the JAX attention
            return paged_attention(q, k_pool, v_pool, block_tables, positions, scale, starts=starts)
        blocks, _, size, _ = k_pool.shape
        pages = jnp.stack([k_pool, v_pool], axis=2)  # (blocks, kv_heads, 2, size, dim)
        pages = pages.transpose(0, 3, 1, 2, 4).reshape(blocks, size, 2 * heads, dim)
        at = jnp.asarray(positions)[:, 0]
        idle = at < 0  # seen as a row of one key, its output dropped
        out = kernel(
            jnp.asarray(q).reshape(rows, heads * groups, dim),
            pages,
            jnp.where(idle, 1, at + 1).astype(jnp.int32),  # keys seen: up to its position
            jnp.asarray(block_tables, jnp.int32),
            np.arange(rows + 1, dtype=np.int32),  # one query a row (static: rows is a shape)
            np.array([rows], np.int32),
            sm_scale=scale,
        )
        out = jnp.where(idle[:, None, None], 0, out)
        return out.reshape(rows, 1, heads, groups, dim).astype(q.dtype)

    return attention
