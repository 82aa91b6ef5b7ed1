"""The weights an engine samples with, in the layout its products read fastest.

A decode step multiplies a few rows (one per sequence in flight) by every weight of the
model, so it reads all the weights once a step and is bound by that read. On a CPU,
XLA's dot reads a decoder layer's linear weight faster held input-major, (in, out),
than in the (out, in) layout of PyTorch and the checkpoints: on the ~50M preset a
(16 × 512) · (512 × 1536) product alone ran 1.5× faster that way, and the engine 1.04×
faster on the rollout bench's workloads (the long tail at 16 slots and equal lengths at
64, 64 prompts × 4, three rounds taking turns). So on a CPU the engine holds those
weights transposed, copied once per weight update, and its model's
:class:`rlax_core.models.qwen.layers.Linear` modules read them so; the LM head stays
(vocab, hidden), its product runs as fast either way. Accelerators' dots read either
layout: there the weights stay as given, with no copy.

Weights still arrive by Hugging Face name and layout (:meth:`EngineWeights.set_params`):
they are placed as a checkpoint holds them, then transposed on the device.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
from flax import nnx

from rlax_core.models.params import param_name, with_params
from rlax_core.models.qwen import Qwen
from rlax_core.models.qwen.layers import Linear


class EngineWeights:
    """A model's weights as an engine's jitted step takes them: a flat list of arrays
    (flattening an ``nnx.State`` is Python work a step would otherwise pay), with the
    decoder layers' linear weights input-major where ``input_major``.

    Args:
        model: the structure, and the first weights.
        input_major: hold the decoder layers' linear weights as (in, out) (None: on a
            CPU).
    """

    def __init__(self, model: Qwen, *, input_major: bool | None = None) -> None:
        if input_major is None:
            input_major = jax.default_backend() == "cpu"
        self.structure, state = nnx.split(model)  # what set_model accepts
        engine_model = nnx.merge(self.structure, state)  # new modules, the same arrays
        names = set()  # of the weights held transposed
        for path, module in nnx.iter_modules(engine_model):
            # The decoder layers' (the LM head, also a Linear, is read as it is stored).
            if input_major and isinstance(module, Linear) and path[:2] == ("model", "layers"):
                module.input_major = True
                names.add(f"{param_name(path)}.weight")
        self.graphdef, _ = nnx.split(engine_model)
        leaves, self._treedef = jax.tree_util.tree_flatten_with_path(state)
        self._transposed = tuple(param_name(path) in names for path, _ in leaves)
        # Placing by name needs each weight's shape and sharding as checkpoints hold it.
        self._template = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
        )
        self._transpose = jax.jit(lambda arrays: [a.T for a in arrays])
        self.leaves: list[jax.Array] = []
        self.use(state)

    def use(self, state: nnx.State) -> None:
        """Samples with ``state``'s weights (a model's, as ``nnx.split`` gives them)."""
        leaves = list(zip(jax.tree.leaves(state), self._transposed, strict=True))
        moved = iter(self._transpose([a for a, transposed in leaves if transposed]))
        self.leaves = [next(moved) if transposed else a for a, transposed in leaves]

    def set_params(
        self, params: Mapping[str, np.ndarray | jax.Array], *, in_place: bool = False
    ) -> None:
        """Samples with these weights (Hugging Face name → array, in its layout); see
        :func:`rlax_core.models.params.with_params`."""
        self.use(with_params(self._template, params, in_place=in_place))

    def model(self, leaves: list[jax.Array]) -> Qwen:
        """The engine's model over ``leaves`` (inside a traced step)."""
        return nnx.merge(self.graphdef, jax.tree.unflatten(self._treedef, leaves))
