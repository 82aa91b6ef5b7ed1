"""Drawing one token per row: the inverse-CDF sampler against the distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlax_core.generate.sampling import sample_rows

DRAWS = 100_000


def _draw(probs: np.ndarray, seed: int = 0) -> np.ndarray:
    keys = jax.vmap(jax.random.key)(jnp.arange(DRAWS, dtype=jnp.uint32) + seed * DRAWS)
    with np.errstate(divide="ignore"):
        log_probs = jnp.asarray(np.log(np.tile(probs, (DRAWS, 1))), jnp.float32)
    return np.asarray(jax.jit(sample_rows)(keys, log_probs))


def test_tokens_are_drawn_with_their_probabilities() -> None:
    # Mass in several blocks of the two-level search, zeros in between and at the ends.
    probs = np.zeros(1000)
    probs[[3, 7, 255, 256, 600, 998]] = [0.3, 0.05, 0.15, 0.2, 0.1, 0.2]
    counts = np.bincount(_draw(probs), minlength=1000)
    assert counts[probs == 0].sum() == 0  # a token of probability zero is never drawn
    expected = probs * DRAWS
    kept = probs > 0
    # Every count within 5 standard deviations of its binomial mean.
    sigma = np.sqrt(expected[kept] * (1 - probs[kept]))
    assert (np.abs(counts[kept] - expected[kept]) < 5 * sigma).all(), counts[kept]


def test_a_single_possible_token_is_always_drawn() -> None:
    for token in (0, 255, 256, 511):
        probs = np.zeros(512)
        probs[token] = 1.0
        assert (_draw(probs, seed=token) == token).all()


def test_rows_draw_independently_of_each_other() -> None:
    key = jax.random.key(3)
    keys = jnp.stack([key, key])
    log_probs = jnp.log(jnp.full((2, 300), 1 / 300, jnp.float32))
    alone = sample_rows(keys[:1], log_probs[:1])
    both = sample_rows(keys, log_probs)
    assert int(both[0]) == int(both[1]) == int(alone[0])
