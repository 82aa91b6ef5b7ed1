"""Attention over a paged KV cache against dense attention over each row's own keys."""

from __future__ import annotations

import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ref_ragged_paged_attention

from rlax_core.generate.paged.attention import TILE_KEYS, paged_attention
from rlax_core.generate.paged.ragged_kernel import ragged_kernel_attention

HEADS, GROUPS, DIM, BLOCK, NUM_BLOCKS = 2, 3, 8, 4, 64


def dense_reference(q, k_pool, v_pool, tables, positions, scale) -> np.ndarray:
    """Float64 softmax attention of each query over its row's keys up to its position."""
    rows, queries = positions.shape
    out = np.zeros(q.shape)
    for r in range(rows):
        for i in range(queries):
            p = positions[r, i]
            if p < 0:
                continue
            keys = np.concatenate([k_pool[b] for b in tables[r]], axis=1)[:, : p + 1]
            values = np.concatenate([v_pool[b] for b in tables[r]], axis=1)[:, : p + 1]
            scores = np.einsum("kgd,ksd->kgs", q[r, i], keys) * scale
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            out[r, i] = np.einsum("kgs,ksd->kgd", weights, values)
    return out


def case(rng, rows: int, queries: int, lengths: list[int]):
    columns = max(-(-n // BLOCK) for n in lengths) + 2
    tables = rng.permutation(NUM_BLOCKS)[: rows * columns].reshape(rows, columns)
    positions = np.full((rows, queries), -1, np.int32)
    for r, n in enumerate(lengths):
        if n:  # the row's last ``queries`` positions (fewer if it is shorter)
            at = np.arange(max(0, n - queries), n)
            positions[r, : len(at)] = at
    q = rng.normal(size=(rows, queries, HEADS, GROUPS, DIM)).astype(np.float32)
    k_pool = rng.normal(size=(NUM_BLOCKS, HEADS, BLOCK, DIM)).astype(np.float32)
    v_pool = rng.normal(size=(NUM_BLOCKS, HEADS, BLOCK, DIM)).astype(np.float32)
    return q, k_pool, v_pool, tables.astype(np.int32), positions


@pytest.mark.parametrize(
    ("queries", "lengths"),
    [
        # decode: one query per row, unequal lengths, an idle row, a row in one position
        (1, [3, 17, 0, 1, 9, 30]),
        # several queries per row, one row shorter than its queries
        (3, [2, 11, 6]),
        # one row's prefill chunk: tiles of keys, the last one partly past the row
        (8, [TILE_KEYS + 13]),
        (5, [4]),
    ],
)
def test_paged_attention_equals_dense_attention(queries: int, lengths: list[int]) -> None:
    rng = np.random.default_rng(len(lengths) * 10 + queries)
    q, k_pool, v_pool, tables, positions = case(rng, len(lengths), queries, lengths)
    got = np.asarray(paged_attention(q, k_pool, v_pool, tables, positions, 0.3))
    want = dense_reference(q, k_pool, v_pool, tables, positions, 0.3)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    assert not got[positions < 0].any()  # a padding query gets zeros


def test_a_row_does_not_depend_on_the_rows_beside_it() -> None:
    rng = np.random.default_rng(7)
    q, k_pool, v_pool, tables, positions = case(rng, 4, 1, [21, 5, 13, 2])
    alone = np.asarray(paged_attention(q[2:3], k_pool, v_pool, tables[2:3], positions[2:3], 0.3))
    together = np.asarray(paged_attention(q, k_pool, v_pool, tables, positions, 0.3))
    np.testing.assert_allclose(together[2:3], alone, atol=1e-6)


@pytest.mark.parametrize("queries", [1, 4])  # per history
def test_histories_packed_side_by_side_see_only_their_own_keys(queries: int) -> None:
    """A row that holds several histories' tables side by side, each query bounded
    below by its history's first position there, attends as each history alone."""
    rng = np.random.default_rng(11 + queries)
    lengths = [6, 9, 3]
    q, k_pool, v_pool, tables, positions = case(rng, len(lengths), queries, lengths)
    used = [-(-n // BLOCK) for n in lengths]
    columns = np.cumsum([0, *used])  # each history's first column in the packed row
    packed_table = np.concatenate([tables[r, : used[r]] for r in range(len(lengths))])[None]
    packed_q = q.reshape(1, -1, HEADS, GROUPS, DIM)
    bounds = np.repeat(columns[:-1] * BLOCK, queries)[None].astype(np.int32)
    packed_positions = np.where(positions >= 0, positions + bounds.reshape(positions.shape), -1)
    got = paged_attention(packed_q, k_pool, v_pool, packed_table,
                          packed_positions.reshape(1, -1), 0.3, starts=bounds)  # fmt: skip
    want = dense_reference(q, k_pool, v_pool, tables, positions, 0.3)
    np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, atol=1e-5, rtol=1e-5)


# The ragged paged attention kernel's adapter, the kernel's reference (Pallas's
# ref_ragged_paged_attention, which runs on the CPU) in the kernel's place.


@pytest.mark.parametrize(
    ("dtype", "atol"),
    [
        ("float32", 1e-5),  # both fp32 throughout: accumulation order only
        ("bfloat16", 3e-2),  # the reference rounds its probabilities to bf16 first
    ],
)
def test_the_kernel_attends_as_the_engine_does_on_decode_rows(dtype: str, atol: float) -> None:
    """One query a row, unequal lengths, an idle row and a row at its first position."""
    q, k_pool, v_pool, tables, positions = (
        a.astype(dtype) if a.dtype == np.float32 else a
        for a in case(np.random.default_rng(0), 6, 1, [3, 17, 0, 1, 9, 30])
    )
    attention = ragged_kernel_attention(ref_ragged_paged_attention)
    got = np.asarray(attention(q, k_pool, v_pool, tables, positions, 0.3), np.float32)
    want = np.asarray(paged_attention(q, k_pool, v_pool, tables, positions, 0.3), np.float32)
    assert got.shape == want.shape == (6, 1, *q.shape[2:])
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    assert not got[2].any()  # the idle row gets zeros


def test_a_prefill_chunk_stays_with_the_engines_attention() -> None:
    q, k_pool, v_pool, tables, positions = case(np.random.default_rng(1), 1, 8, [21])
    starts = np.zeros_like(positions)
    attention = ragged_kernel_attention(ref_ragged_paged_attention)
    got = attention(q, k_pool, v_pool, tables, positions, 0.3, starts=starts)
    want = paged_attention(q, k_pool, v_pool, tables, positions, 0.3, starts=starts)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
