"""Decode attention: blocks over the filled slots of a cache, against a plain softmax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.models.qwen.decode_attention import BLOCK, attend_one_query

HEADS, GROUPS, DIM = 2, 3, 8


def _reference(q, k, v, mask, scale):
    """NumPy softmax attention of one query per row over every visible slot, in fp64."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = np.einsum("bkgd,bksd->bkgs", q, k) * scale
    scores = np.where(np.asarray(mask)[:, None, None, :], scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return np.einsum("bkgs,bksd->bkgd", probs, v)


def _inputs(slots: int, filled: int, first_visible: list[int]):
    rng = np.random.default_rng(slots + filled)
    batch = len(first_visible)
    q = rng.normal(size=(batch, HEADS, GROUPS, DIM)).astype(np.float32)
    k = rng.normal(size=(batch, HEADS, slots, DIM)).astype(np.float32)
    v = rng.normal(size=(batch, HEADS, slots, DIM)).astype(np.float32)
    mask = np.zeros((batch, slots), bool)
    for row, first in enumerate(first_visible):
        mask[row, first:filled] = True  # left padding before ``first``
    return q, k, v, mask


@pytest.mark.parametrize(
    ("slots", "filled"),
    [
        (40, 40),  # one block smaller than BLOCK
        (2 * BLOCK, 2 * BLOCK),  # whole blocks
        (2 * BLOCK + 100, 2 * BLOCK + 100),  # the last block starts early to fit
        (3 * BLOCK + 7, BLOCK + 5),  # a cache filled part way: two of four blocks
    ],
)
def test_equals_softmax_attention_over_the_visible_slots(slots: int, filled: int) -> None:
    # Row 1's padding covers a whole block: it sees nothing there, and must not
    # poison the running sums.
    q, k, v, mask = _inputs(slots, filled, first_visible=[0, min(BLOCK + 3, filled - 1), 17])
    out = jax.jit(attend_one_query, static_argnums=4)(q, k, v, mask, 0.3, jnp.int32(filled))
    np.testing.assert_allclose(np.asarray(out), _reference(q, k, v, mask, 0.3), atol=2e-6)


def test_blocks_past_the_filled_slots_are_never_read() -> None:
    slots, filled = 4 * BLOCK, BLOCK + 10
    q, k, v, mask = _inputs(slots, filled, first_visible=[0, 5])
    expected = _reference(q, k, v, mask, 0.3)
    # Garbage where nothing has been written yet: NaN would spread through any
    # product that read it, masked or not.
    k[:, :, 2 * BLOCK :] = np.nan
    v[:, :, 2 * BLOCK :] = np.nan
    out = jax.jit(attend_one_query, static_argnums=4)(q, k, v, mask, 0.3, jnp.int32(filled))
    np.testing.assert_allclose(np.asarray(out), expected, atol=2e-6)
