"""Choosing one token per row: the inverse-CDF draw against the distribution, and greedy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlax_core.generate.next_token import greedy, sample_rows

DRAWS = 100_000


def _draw(probs: np.ndarray, seed: int = 0) -> np.ndarray:
    uniforms = jax.random.uniform(jax.random.key(seed), (DRAWS,))
    with np.errstate(divide="ignore"):
        log_probs = jnp.asarray(np.log(np.tile(probs, (DRAWS, 1))), jnp.float32)
    return np.asarray(jax.jit(sample_rows)(uniforms, log_probs))


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


def test_a_row_draws_from_its_own_uniform_and_distribution_only() -> None:
    rng = np.random.default_rng(0)
    log_probs = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(2, 300)), jnp.float32))
    uniforms = jnp.asarray([0.37, 0.91], jnp.float32)
    both = sample_rows(uniforms, log_probs)
    for row in range(2):
        alone = sample_rows(uniforms[row : row + 1], log_probs[row : row + 1])
        assert int(alone[0]) == int(both[row])
        # The inverse CDF: the drawn token's cumulative probability first reaches 1 - u.
        cdf = np.cumsum(np.exp(np.asarray(log_probs[row], np.float64)))
        assert int(both[row]) == int(np.searchsorted(cdf, 1 - float(uniforms[row])))


def test_greedy_picks_the_first_most_likely_token() -> None:
    logits = jnp.asarray(
        [[0.0, 3.0, 1.0, 3.0], [-jnp.inf, -1.0, -jnp.inf, -2.0], [5.0, 5.0, 5.0, 5.0]]
    )
    assert greedy(logits).tolist() == np.argmax(np.asarray(logits), axis=-1).tolist() == [1, 1, 0]
