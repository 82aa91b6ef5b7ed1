"""replace_params: new weights into an existing model, each on its parameter's sharding."""

from __future__ import annotations

import numpy as np
import pytest

from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import MeshShape, QwenConfig, flat_params, init_model, replace_params


def test_new_weights_land_on_each_parameters_sharding_and_the_old_model_is_kept() -> None:
    model = init_model(QwenConfig.tiny(), mesh=MeshShape(fsdp=2, tensor=4).make())
    before = {n: np.asarray(a) for n, a in flat_params(model).items()}
    new = {n: (v * 3 + 1).astype(np.float64) for n, v in before.items()}  # cast to the model's
    replaced = flat_params(replace_params(model, new))
    for name, array in flat_params(model).items():
        assert replaced[name].sharding == array.sharding, name
        assert replaced[name].dtype == array.dtype, name
        np.testing.assert_array_equal(np.asarray(replaced[name]), new[name].astype(array.dtype))
        np.testing.assert_array_equal(np.asarray(array), before[name])  # untouched


def test_a_missing_or_misshapen_parameter_is_named() -> None:
    model = init_model(QwenConfig.tiny())
    params = {n: np.asarray(a) for n, a in flat_params(model).items()}
    name = "model.layers.1.mlp.up_proj.weight"
    with pytest.raises(KeyError, match=name):
        replace_params(model, {n: a for n, a in params.items() if n != name})
    with pytest.raises(ValueError, match=rf"{name}.*\(128, 65\).*\(128, 64\)"):
        replace_params(model, {**params, name: np.zeros((128, 65), np.float32)})


def test_a_sampler_given_new_weights_samples_as_one_built_from_them() -> None:
    model = init_model(QwenConfig.tiny())
    new = {n: np.asarray(a) * 1.5 for n, a in flat_params(model).items()}
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    prompts = [[1, 2, 3], [4, 5]]
    updated = Sampler(model)
    updated.set_params(new)
    rebuilt = Sampler(replace_params(model, new))
    original = Sampler(model)
    ours, theirs = (s.generate(prompts, params, seed=3) for s in (updated, rebuilt))
    assert ours.tokens == theirs.tokens
    np.testing.assert_allclose(ours.policy_logprobs[0], theirs.policy_logprobs[0], rtol=1e-6)
    assert original.generate(prompts, params, seed=3).policy_logprobs != ours.policy_logprobs
    assert updated.compilations == 1  # new weights, same compiled function
    updated.generate(prompts, params, seed=4)
    assert updated.compilations == 1
