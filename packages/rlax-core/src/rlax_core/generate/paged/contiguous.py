"""A decode burst's contiguous copy of its rows' blocks.

Where the rows of a burst see near-equal numbers of blocks, the engine gathers each
row's blocks once, at the burst's start, into a copy laid out as a static cache
(rows, kv_heads, positions, head_dim); each step writes its rows' new keys and values
there (and into the pool) and reads them back with the static sampler's decode
attention (:func:`rlax_core.models.qwen.decode_attention.attend_one_query`), in the
same fp32 arithmetic as :func:`rlax_core.generate.paged.attention.paged_attention`.
The copy is dropped when the burst ends: the pool holds every key.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlax_core.generate.paged.sequences import StepPlan
from rlax_core.models.qwen.decode_attention import attend_one_query

# A burst gathers its rows' blocks into a contiguous copy when that copy (rows × the
# longest row's blocks, to a power of two) holds at most this many times the blocks the
# rows see: on a CPU a key read through the block tables costs about twice one read from
# a contiguous copy (XLA does not fuse the table walk's gather into the products), and
# the copy's gather is paid once per burst, not once per step.
CONTIGUOUS_COST = 2
# The most blocks (rows × width) a copy holds: a long tail's wide copies (64 rows × 16
# or 32 blocks of the ~50M preset) made its bursts slower than reading the pool (the
# gather leaves the caches, and a burst there ends after a few steps).
CONTIGUOUS_MOST = 512
# A copy holds at most as many blocks as the pool, so that the engine's KV memory stays
# within twice the pool's (``kv_tokens``): where the pool is sized tight, an uncapped copy
# could outgrow it. (A quarter of the pool bounded it tighter: at 16 slots of the ~50M
# preset the long tail's KV came to 2.6x fewer bytes than the static sampler's, but equal
# lengths, whose pool holds just their tokens, were left no copy and ran at 0.83x the
# static sampler's tokens/s. Turn contiguous_bursts off for the tightest memory.)

# A burst expected to run fewer steps than this reads the pool: gathering the copy costs
# what two or three steps save (the ~50M preset on a CPU: at 64 rows × 6 blocks a
# 29 ms gather against 17 ms saved a step, at 16 rows × 32 blocks 56 ms against 18 ms),
# and a burst that ends as soon as a row finishes, one token from its budget, runs one.
MIN_COPY_STEPS = 3


def most_copied(pool_blocks: int) -> int:
    """The most blocks (rows × width) a copy holds beside a pool of ``pool_blocks``."""
    return min(CONTIGUOUS_MOST, pool_blocks)


def gather_contiguous(pool: jax.Array, tables: jax.Array) -> jax.Array:
    """Each row's blocks (``tables``: rows × columns) side by side: (rows, kv_heads,
    columns × block_size, head_dim), the layout of a static cache."""
    rows, columns = tables.shape
    _, heads, block, dim = pool.shape
    gathered = jnp.swapaxes(pool[tables], 1, 2)  # (rows, kv_heads, columns, block, dim)
    return gathered.reshape(rows, heads, columns * block, dim)


def extend_contiguous(
    copy: tuple[jax.Array, jax.Array], k: jax.Array, v: jax.Array, positions: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """A contiguous copy with each row's new key and value (rows, kv_heads, head_dim) at
    its position (an idle row's, -1, is dropped)."""
    rows = jnp.arange(k.shape[0])
    at = jnp.where(positions >= 0, positions, copy[0].shape[2])  # past the end: dropped
    return tuple(c.at[rows, :, at].set(new.astype(c.dtype), mode="drop")
                 for c, new in ((copy[0], k), (copy[1], v)))  # fmt: skip


def attend_contiguous(
    q: jax.Array, k: jax.Array, v: jax.Array, positions: jax.Array, scale: float
) -> jax.Array:
    """Each decode row's query (rows, kv_heads, groups, head_dim) against its contiguous
    keys up to its position (an idle row, at -1, gets zeros)."""
    seen = jnp.arange(k.shape[2])[None] <= positions[:, None]
    return attend_one_query(q, k, v, seen, scale, jnp.max(positions) + 1)


def width_bucket(blocks: int, most: int) -> int:
    """A contiguous copy's blocks per row: a power of two, at most ``most``."""
    return min(most, 1 << (blocks - 1).bit_length())


def copy_width(plan: StepPlan, rows: int, block_size: int, most: int, most_blocks: int) -> int:
    """The blocks per row of the copy a burst (``plan``, run on ``rows`` rows, padding
    included) gathers, at most ``most``; 0 where reading the pool costs less (the copy
    would be mostly padding, or the burst is expected to run fewer than
    ``MIN_COPY_STEPS`` steps) or the copy would hold more than ``most_blocks``
    (:func:`most_copied`)."""
    left = [min(plan.steps, row.sample.limit - len(row.sample.tokens)) for row in plan.decode]
    # Ending at the first row's finish, the burst runs at most the fewest steps left.
    if (min(left) if plan.until_finish else max(left)) < MIN_COPY_STEPS:
        return 0
    seen = [(row.position + n - 1) // block_size + 1
            for row, n in zip(plan.decode, left, strict=True)]  # fmt: skip
    width = width_bucket(max(seen), most)
    copy = rows * width
    return width if copy <= min(most_blocks, CONTIGUOUS_COST * sum(seen)) else 0
