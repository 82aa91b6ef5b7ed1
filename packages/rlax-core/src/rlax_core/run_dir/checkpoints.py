"""Checkpoints of the whole RL state, with Orbax.

Two items per step directory: ``state`` (parameters, optimiser state, the reference
policy — sharded arrays, written by every host) and ``meta`` (JSON: step, policy
version, optimiser updates, the data cursor, the controller's accounting and the groups
in flight). Orbax writes each checkpoint to a temporary directory and renames it when
complete, so a crash never leaves a half-written checkpoint that a resume would pick up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from rlax_core.errors import RlaxError


class CheckpointStore:
    """The checkpoints of one run directory.

    Args:
        directory: where step directories are written (``RUN_DIR/checkpoints``).
        keep: how many of the newest checkpoints to keep.
    """

    def __init__(self, directory: str | Path, *, keep: int = 2) -> None:
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )

    def latest_step(self) -> int | None:
        """The step of the newest complete checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Writes a checkpoint and waits until it is complete on disk."""
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )
        self._manager.wait_until_finished()

    def restore(self, state_like: Any, step: int | None = None) -> tuple[Any, dict]:
        """Reads a checkpoint into arrays shaped and sharded like ``state_like``.

        Raises:
            RlaxError: there is no checkpoint, or it does not fit ``state_like`` (a run
                directory of a different model).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise RlaxError(f"no checkpoint in {self.directory}")
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state_like
        )
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()
                ),
            )
        except (ValueError, KeyError, FileNotFoundError) as exc:
            raise RlaxError(
                f"checkpoint {step} in {self.directory} does not fit this run's model and "
                f"optimiser ({type(exc).__name__}: {exc}); was it written by another config?"
            ) from None
        return restored["state"], restored["meta"]

    def close(self) -> None:
        """Finishes pending writes and releases the manager."""
        self._manager.wait_until_finished()
        self._manager.close()
