"""The model's own promises: cache decoding, rematerialisation, dtypes, shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlax_core.models import Qwen, QwenConfig, flat_params, init_model
from rlax_core.models.qwen.decode_attention import BLOCK as DECODE_BLOCK


@pytest.mark.parametrize(
    ("architecture", "slots"), [("qwen2", 16), ("qwen3", 16), ("qwen2", 2 * DECODE_BLOCK + 10)]
)
def test_decoding_with_a_cache_equals_the_full_forward(architecture: str, slots: int) -> None:
    model = init_model(QwenConfig.tiny(architecture), seed=0)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 512, (2, 9)), jnp.int32)
    full = nnx.jit(lambda m, t: m(t).logits)(model, tokens)
    step = nnx.jit(
        lambda m, t, p, cache, i, valid: m(
            t, positions=p, cache=cache, cache_index=i, cache_valid=valid
        )
    )
    cache = model.init_cache(2, slots)  # the larger one decodes in blocks of the cache
    valid = jnp.zeros((2, slots), bool).at[:, :5].set(True)
    out = step(model, tokens[:, :5], jnp.arange(5)[None].repeat(2, 0), cache, 0, valid)
    assert out.hidden_states is None
    steps, cache = [out.logits[:, -1]], out.cache
    for i in range(5, 9):
        valid = valid.at[:, i].set(True)
        out = step(model, tokens[:, i : i + 1], jnp.full((2, 1), i), cache, i, valid)
        steps.append(out.logits[:, 0])
        cache = out.cache
    np.testing.assert_allclose(np.stack(steps[:-1], 1), np.asarray(full[:, 4:8]), atol=1e-5)


def test_logits_at_given_positions_equal_the_full_forward() -> None:
    model = init_model(QwenConfig.tiny(), seed=0)
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 512, (3, 10)), jnp.int32)
    positions = jnp.asarray([[0, 4, 9], [5, 6, 7], [9, 9, 2]], jnp.int32)
    full = np.asarray(model(tokens).logits)
    some = np.asarray(model(tokens, logits_at=positions).logits)
    assert some.shape == (3, 3, 512)
    expected = np.take_along_axis(full, np.asarray(positions)[..., None], axis=1)
    np.testing.assert_allclose(some, expected, rtol=1e-6, atol=1e-6)


def test_remat_changes_memory_not_gradients() -> None:
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 512, (2, 12)), jnp.int32)

    def grads(remat: bool) -> dict:
        model = init_model(QwenConfig.tiny(remat=remat), seed=0)

        def loss(m: Qwen) -> jax.Array:
            return jax.nn.log_softmax(m(tokens).logits)[..., 0].mean()

        return flat_params(nnx.jit(nnx.grad(loss))(model))

    plain, remat = grads(False), grads(True)
    assert plain.keys() == remat.keys()
    for name in plain:
        scale = float(np.abs(plain[name]).max())
        np.testing.assert_allclose(
            remat[name], plain[name], rtol=0, atol=1e-5 * scale, err_msg=name
        )


def test_bfloat16_parameters_and_activations() -> None:
    model = init_model(QwenConfig.tiny(param_dtype="bfloat16", dtype="bfloat16"), seed=0)
    assert {a.dtype for a in flat_params(model).values()} == {jnp.dtype(jnp.bfloat16)}
    out = nnx.jit(lambda m, t: m(t))(model, jnp.ones((1, 4), jnp.int32))
    assert out.cache is None and out.hidden_states is None  # None fields survive jit
    logits = out.logits
    assert logits.dtype == jnp.float32  # logits always come back in fp32
    assert bool(jnp.isfinite(logits).all())


def test_tied_models_have_no_lm_head() -> None:
    tied = flat_params(init_model(QwenConfig.tiny(tie_embeddings=True), seed=0))
    untied = flat_params(init_model(QwenConfig.tiny(tie_embeddings=False), seed=0))
    assert "lm_head.weight" not in tied and untied["lm_head.weight"].shape == (512, 64)
    assert len(tied) == 2 * 12 + 2  # 12 per Qwen2 layer, the embedding, the final norm
    assert sum(int(a.size) for a in tied.values()) == QwenConfig.tiny().num_params()
