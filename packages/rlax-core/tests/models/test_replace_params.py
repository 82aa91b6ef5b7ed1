"""replace_params: new weights into an existing model, each on its parameter's sharding."""

from __future__ import annotations

import numpy as np
import pytest

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
