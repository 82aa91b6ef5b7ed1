"""The optimiser: optax's clipping semantics, and an update without temporary buffers."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

from rlax_core.config.sections import AlgorithmSection, TrainerSection
from rlax_core.models import QwenConfig, init_model
from rlax_core.rl.algorithms.optimizer import clip_by_global_norm
from rlax_core.rl.roles.learner import Learner


@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipped, and left alone
def test_clipping_equals_optax(max_norm: float) -> None:
    rng = np.random.default_rng(0)
    grads = {"a": rng.normal(size=(7, 3)), "b": rng.normal(size=5)}
    grads = {name: g.astype(np.float32) for name, g in grads.items()}
    ours, state = clip_by_global_norm(max_norm).update(grads, clip_by_global_norm(1).init(grads))
    theirs, _ = optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())
    for name in grads:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-6, atol=0)
    assert state == optax.EmptyState()


def test_the_update_needs_no_temporary_buffers() -> None:
    """Clipping, AdamW and the new parameters fuse into each leaf's in-place update.

    With optax's clipping XLA kept a clipped copy of every gradient: temporaries of the
    parameters' whole size."""
    model = init_model(QwenConfig.tiny(vocab_size=32768), seed=0)
    learner = Learner(model, trainer=TrainerSection(), algorithm=AlgorithmSection(),
                      temperature=1.0, max_new_tokens=8)  # fmt: skip
    params = learner.params
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    compiled = learner._apply.lower(params, learner.opt_state, params).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < param_bytes / 100
