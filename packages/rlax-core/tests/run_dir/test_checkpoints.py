"""Checkpoints: saves in the background, committed steps, arrays donated while writing."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.errors import RlaxError
from rlax_core.run_dir.checkpoints import CheckpointStore


def test_a_save_is_committed_later_and_survives_donating_its_arrays(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    state = {"w": jnp.arange(4_000_000, dtype=jnp.float32), "b": jnp.ones((3,))}
    expected = jax.tree.map(np.array, state)
    store.save(5, state, {"step": 5})  # returns at once; the copy is made in a thread
    assert store.ready() >= 0  # the copy is done: the arrays may change now
    # The next update donates the arrays just saved, as the learner's does.
    overwrite = jax.jit(lambda t: jax.tree.map(lambda v: v * 0 - 7, t), donate_argnums=0)
    jax.block_until_ready(overwrite(state))
    assert store.wait() == [5]
    assert store.committed() == []  # each step is reported once
    restored, meta = store.restore(jax.tree.map(jnp.zeros_like, expected))
    assert meta == {"step": 5}
    for name, array in expected.items():
        np.testing.assert_array_equal(np.asarray(restored[name]), array)
    store.close()


def test_committed_names_every_step_saved_and_the_newest_is_restored(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    for step in (1, 2, 3):
        store.save(step, {"x": jnp.full((8,), float(step))}, {"step": step})
    assert store.wait() == [1, 2, 3]
    assert store.latest_step() == 3
    assert sorted(int(p.name) for p in store.directory.iterdir() if p.name.isdigit()) == [2, 3]
    restored, _ = store.restore({"x": jnp.zeros((8,))})
    np.testing.assert_array_equal(np.asarray(restored["x"]), np.full((8,), 3.0))
    store.close()


def test_a_checkpoint_of_another_shape_is_a_clear_error(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(1, {"x": jnp.zeros((8,))}, {"step": 1})
    store.wait()
    with pytest.raises(RlaxError, match="does not fit this run's model"):
        store.restore({"y": jnp.zeros((8,))})
    store.close()
    with pytest.raises(RlaxError, match="no checkpoint"):
        CheckpointStore(tmp_path / "empty").restore({"x": jnp.zeros((8,))})
