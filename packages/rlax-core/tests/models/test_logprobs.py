"""Teacher-forced log-probabilities: the plain computation's values, one chunk's memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlax_core.models import QwenConfig, init_model, policy_log_softmax, teacher_forced_logprobs
from rlax_core.models.logprobs import token_logprobs_and_entropy

CONFIG = QwenConfig.tiny(vocab_size=4096)


def _tokens(batch: int, length: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, CONFIG.vocab_size, (batch, length), np.int32)


def test_chunks_of_the_head_give_the_whole_heads_values() -> None:
    model = init_model(CONFIG, seed=0)
    tokens = _tokens(3, 13)
    valid = np.ones(tokens.shape, bool)
    valid[1, :4] = False  # left padding
    log_probs = policy_log_softmax(model(tokens, valid).logits[:, :-1], 0.7)
    whole = np.take_along_axis(np.asarray(log_probs), tokens[:, 1:, None], axis=-1)[..., 0]
    chunked = teacher_forced_logprobs(model, tokens, valid, 0.7, chunk=5)  # 36 positions
    np.testing.assert_allclose(np.asarray(chunked), whole, rtol=0, atol=1e-6)


def test_only_a_chunk_of_logits_is_in_memory() -> None:
    config = CONFIG.replace(vocab_size=32768)
    graphdef, state = nnx.split(init_model(config, seed=0))
    tokens = _tokens(2, 257)
    whole_logits = tokens.shape[0] * (tokens.shape[1] - 1) * config.vocab_size * 4  # 67 MB

    def scored(state, tokens):
        return teacher_forced_logprobs(nnx.merge(graphdef, state), tokens, chunk=64)

    compiled = jax.jit(scored).lower(state, tokens).compile()
    # The whole head's logits and their log-softmax would be twice ``whole_logits``.
    assert compiled.memory_analysis().temp_size_in_bytes < whole_logits / 2


@pytest.mark.parametrize("vocab", [4096, 1001])  # 1001 = 7 × 11 × 13: odd slice counts
def test_vocabulary_slices_give_the_whole_heads_values_and_gradients(vocab: int) -> None:
    """Log-probabilities, entropies and their gradients (the entropy's too, as an entropy
    bonus has it) against the whole head's log-softmax, at a temperature."""
    config = CONFIG.replace(vocab_size=vocab)
    graphdef, state = nnx.split(init_model(config, seed=0))
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(3, 11, config.hidden_size)).astype(np.float32)
    targets = rng.integers(0, vocab, (3, 11)).astype(np.int32)
    weights = rng.normal(size=(2, 3, 11)).astype(np.float32)

    def whole(state, hidden):
        model = nnx.merge(graphdef, state)
        log_probs = policy_log_softmax(model.logits_from_hidden(hidden), 0.7)
        logp = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
        return logp, -(jnp.exp(log_probs) * log_probs).sum(axis=-1)

    def sliced(state, hidden):
        model = nnx.merge(graphdef, state)  # 33 positions at 4 a chunk: 9 slices or more
        return token_logprobs_and_entropy(
            model, hidden, targets, 0.7, chunk=4, entropy_gradient=True
        )

    def loss(fn):
        def value(state, hidden):
            logp, entropy = fn(state, hidden)
            return (jnp.exp(logp) * weights[0]).sum() + (entropy * weights[1]).sum()

        return value

    for got, want in zip(sliced(state, hidden), whole(state, hidden), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    got = jax.grad(loss(sliced), argnums=(0, 1))(state, hidden)
    want = jax.grad(loss(whole), argnums=(0, 1))(state, hidden)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        scale = float(np.abs(np.asarray(w)).max()) or 1.0
        np.testing.assert_allclose(np.asarray(g) / scale, np.asarray(w) / scale, atol=1e-5)
