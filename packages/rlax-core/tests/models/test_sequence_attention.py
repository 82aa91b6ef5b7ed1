"""Whole-sequence attention by causal query blocks, against a plain softmax in fp64."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.models.qwen import sequence_attention
from rlax_core.models.qwen.sequence_attention import attend_causal

HEADS, GROUPS, DIM = 2, 3, 8
SCALE = 0.3


def _reference(q, k, v, mask):
    """Softmax attention over every visible slot in fp64; rows that see nothing get 0."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = np.einsum("btkgd,bksd->bkgts", q, k) * SCALE
    visible = np.asarray(mask)[:, None, None]
    scores = np.where(visible, scores, -np.inf)
    top = np.where(visible.any(-1, keepdims=True), scores.max(-1, keepdims=True), 0.0)
    probs = np.where(visible, np.exp(scores - top), 0.0)
    probs /= np.maximum(probs.sum(-1, keepdims=True), 1e-300)
    return np.einsum("bkgts,bksd->btkgd", probs, v)


def _inputs(t: int, first_slot: int, padding: list[int]):
    """Queries at slots ``first_slot …``, keys up to the last query, causal masks with
    ``padding[row]`` padded slots on the left of each row."""
    rng = np.random.default_rng(t + first_slot)
    batch, slots = len(padding), first_slot + t
    q = rng.normal(size=(batch, t, HEADS, GROUPS, DIM)).astype(np.float32)
    k = rng.normal(size=(batch, HEADS, slots, DIM)).astype(np.float32)
    v = rng.normal(size=(batch, HEADS, slots, DIM)).astype(np.float32)
    query_slots = first_slot + np.arange(t)
    causal = np.arange(slots)[None, :] <= query_slots[:, None]
    mask = np.stack([causal & (np.arange(slots) >= pad)[None, :] for pad in padding])
    return q, k, v, mask


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 queries, at most 3 of them: short inputs then take several blocks,
    and longer ones longer blocks."""
    monkeypatch.setattr(sequence_attention, "QUERY_BLOCK", 4)
    monkeypatch.setattr(sequence_attention, "MAX_BLOCKS", 3)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize(
    ("t", "first_slot"),
    [
        (3, 0),  # one block, shorter than a block
        (12, 0),  # three whole blocks
        (13, 0),  # blocks of 8 (13 > 4 × 3): a short last one
        (10, 5),  # a prefill after 5 cached slots
        (1, 7),  # one query
    ],
)
def test_equals_softmax_attention_over_the_visible_slots(t: int, first_slot: int) -> None:
    # Row 1's padding hides its first queries' every slot: they must come out finite.
    q, k, v, mask = _inputs(t, first_slot, padding=[0, first_slot + 2])
    attend = jax.jit(partial(attend_causal, scale=SCALE, first_slot=first_slot))
    out = np.asarray(attend(q, k, v, mask))
    assert np.isfinite(out).all()
    visible = mask.any(-1)  # a query that sees nothing has no defined attention
    np.testing.assert_allclose(out[visible], _reference(q, k, v, mask)[visible], atol=2e-6)


@pytest.mark.usefixtures("small_blocks")
def test_a_block_reads_no_slot_after_its_last_query() -> None:
    q, k, v, mask = _inputs(12, 0, padding=[0])
    expected = _reference(q, k, v, mask)[0, :4]
    # Garbage behind the first block's last query: NaN would spread through any
    # product that read it, masked or not.
    k[:, :, 4:] = np.nan
    v[:, :, 4:] = np.nan
    out = jax.jit(partial(attend_causal, scale=SCALE, first_slot=0))(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(out)[0, :4], expected, atol=2e-6)


@pytest.mark.usefixtures("small_blocks")
def test_gradients_equal_the_whole_squares() -> None:
    """Training differentiates it: the blocks' gradients are the unblocked form's."""
    q, k, v, mask = _inputs(11, 0, padding=[0, 3])
    weights = np.random.default_rng(0).normal(size=q.shape).astype(np.float32)
    # A query that sees nothing (padding) has no defined output, and no loss reads it.
    weights[~mask.any(-1)] = 0

    def loss(first_slot, q, k, v):
        return (attend_causal(q, k, v, mask, SCALE, first_slot) * weights).sum()

    blocked = jax.grad(partial(loss, 0), argnums=(0, 1, 2))(q, k, v)
    whole = jax.grad(partial(loss, None), argnums=(0, 1, 2))(q, k, v)  # one block, all slots
    for got, want in zip(blocked, whole, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_unknown_first_slot_attends_every_slot() -> None:
    """A traced cache index: no block may be cut short, the mask alone decides."""
    q, k, v, mask = _inputs(6, 4, padding=[1])
    out = jax.jit(partial(attend_causal, scale=SCALE, first_slot=None))(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, mask), atol=2e-6)


def test_bf16_inputs_come_out_in_bf16() -> None:
    q, k, v, mask = _inputs(5, 0, padding=[0])
    cast = [jnp.asarray(a, jnp.bfloat16) for a in (q, k, v)]
    out = attend_causal(*cast, mask, SCALE, 0)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        np.asarray(out, np.float32), _reference(*cast, mask).astype(np.float32), atol=2e-2
    )


@pytest.mark.usefixtures("small_blocks")
def test_scored_slots_count_the_blocks_prefixes() -> None:
    # Three blocks of 4 queries see 4, 8 and 12 slots: 96 scores of the square's 144.
    assert sequence_attention.scored_slots(12) == 4 * 4 + 4 * 8 + 4 * 12
    assert sequence_attention.scored_slots(3) == 9  # one block: the whole square
