"""Teacher-forced log-probabilities: the plain computation's values, one chunk's memory."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from rlax_core.models import QwenConfig, init_model, policy_log_softmax, teacher_forced_logprobs

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
