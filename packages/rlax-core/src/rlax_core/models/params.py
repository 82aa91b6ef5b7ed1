"""A model's parameters as a flat mapping of Hugging Face names to arrays, and back.

The flat form is what checkpoints store and what the parameter store publishes; the
names are the model's NNX paths joined with dots (``model.layers.0.mlp.up_proj.weight``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, SingleDeviceSharding

from rlax_core.models.qwen import Qwen, QwenConfig
from rlax_core.models.sharding import param_sharding


def flat_params(model: nnx.Module) -> dict[str, jax.Array]:
    """name → array of every parameter, in a stable (sorted) order."""
    return params_by_name(nnx.state(model, nnx.Param))


def params_by_name(state: nnx.State) -> dict[str, jax.Array]:
    """name → array of a model's parameter state (``nnx.split(model, nnx.Param)``), sorted."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(state)
    return dict(sorted((param_name(path), array) for path, array in leaves))


def param_shapes(config: QwenConfig) -> dict[str, jax.ShapeDtypeStruct]:
    """name → shape and dtype of every parameter of a model with ``config``, without memory."""
    abstract = nnx.eval_shape(lambda: Qwen(config, rngs=nnx.Rngs(0)))
    return flat_params(abstract)


def build_model(
    config: QwenConfig,
    make_array: Callable[[str, jax.ShapeDtypeStruct, jax.sharding.Sharding], jax.Array],
    mesh: Mesh | None = None,
) -> Qwen:
    """Builds a model whose every parameter comes from ``make_array(name, spec, sharding)``.

    Used by the checkpoint loader (arrays straight from file slices onto their shards)
    and by :func:`replace_params`.
    """
    abstract = nnx.eval_shape(lambda: Qwen(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    pure = nnx.to_pure_dict(state)

    def fill(path: tuple, spec: jax.ShapeDtypeStruct) -> jax.Array:
        name = param_name(path)
        return make_array(name, spec, _sharding(mesh, name, spec.shape))

    nnx.replace_by_pure_dict(state, jax.tree_util.tree_map_with_path(fill, pure))
    return nnx.merge(graphdef, state)


def init_model(config: QwenConfig, *, seed: int = 0, mesh: Mesh | None = None) -> Qwen:
    """A randomly initialised model, placed on ``mesh`` (one device if None)."""
    model = Qwen(config, rngs=nnx.Rngs(seed))
    return place_model(model, mesh) if mesh is not None else model


def place_model(model: Qwen, mesh: Mesh) -> Qwen:
    """Moves every parameter onto its sharding on ``mesh``."""
    params = {name: np.asarray(value) for name, value in flat_params(model).items()}

    def make(name: str, spec: jax.ShapeDtypeStruct, sharding: jax.sharding.Sharding) -> jax.Array:
        # Each process places its own shards (on a multi-host mesh every process built
        # the same model from the same seed); device_put would compare them first.
        value = params[name]
        return jax.make_array_from_callback(spec.shape, sharding, lambda index: value[index])

    return build_model(model.config, make, mesh)


def replace_params(model: Qwen, params: Mapping[str, np.ndarray | jax.Array]) -> Qwen:
    """A model with the same config and sharding whose parameters are ``params``.

    Raises:
        KeyError: a parameter is missing from ``params``.
        ValueError: a shape differs.
    """
    graphdef, state, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, with_params(state, params), rest)


def with_params(
    state: nnx.State, params: Mapping[str, np.ndarray | jax.Array], *, in_place: bool = False
) -> nnx.State:
    """``state`` (a model's parameters) with every array replaced by the same-named one.

    Each array goes onto the sharding of the one it replaces, in one batched transfer;
    no model is built or traced. An inference worker does this for every new policy
    version (see :meth:`rlax_core.generate.Sampler.set_params`).

    Args:
        in_place: let JAX use the host arrays' memory as they are where it can (a CPU
            device and 64-byte aligned arrays, as a parameter store's are): no copy.
            Only for arrays nobody writes to afterwards, such as a fetched version's.

    Raises:
        KeyError: a parameter is missing from ``params``.
        ValueError: a shape differs.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    values = []
    for path, current in leaves:
        name = param_name(path)
        value = params[name]
        if tuple(value.shape) != tuple(current.shape):
            raise ValueError(
                f"parameter {name!r} is {value.shape}, the model needs {current.shape}"
            )
        values.append(np.asarray(value, dtype=current.dtype))
    placed = jax.device_put(values, [current.sharding for _, current in leaves], may_alias=in_place)
    return jax.tree_util.tree_unflatten(treedef, placed)


def host_model(config: QwenConfig, params: Mapping[str, np.ndarray]) -> Qwen:
    """A model on this process's first device whose parameters are ``params`` (host arrays).

    A multi-host trainer's leader evaluates and exports such a local copy of the policy.
    """

    def make(name: str, spec: jax.ShapeDtypeStruct, sharding: jax.sharding.Sharding) -> jax.Array:
        return jax.device_put(np.asarray(params[name]).astype(spec.dtype), sharding)

    return build_model(config, make)


def param_name(path: tuple) -> str:
    """The flat name (``model.layers.0.mlp.up_proj.weight``) of a state leaf's key path."""
    keys = (k for k in path if not isinstance(k, jax.tree_util.GetAttrKey))  # Variable.value
    return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in keys)


def _sharding(mesh: Mesh | None, name: str, shape: tuple[int, ...]) -> jax.sharding.Sharding:
    if mesh is None:
        return SingleDeviceSharding(jax.local_devices()[0])  # this process's own
    return param_sharding(mesh, name, shape)
