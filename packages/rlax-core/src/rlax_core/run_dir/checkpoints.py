"""Checkpoints of the whole RL state, with Orbax.

Two items per step directory: ``state`` (parameters, optimiser state, the reference
policy — sharded arrays, written by every host) and ``meta`` (JSON: step, policy
version, optimiser updates, the data cursor, the controller's accounting and the groups
in flight). Orbax writes each checkpoint to a temporary directory and renames it when
complete, so a crash never leaves a half-written checkpoint that a resume would pick up.

Saves are asynchronous, from the start: :meth:`CheckpointStore.save` hands the save to
a thread of its own and returns at once. Orbax first takes its own copy of the arrays
there, then writes the files in the background. The caller calls :meth:`ready` before
it next changes or donates the saved arrays (the learner's update does): in the steady
state the copy finished long before (while the next batch was generated), so nothing
waits. A checkpoint counts only once it is committed: :meth:`committed` names the
steps whose writes have finished, which is when the rollouts they cover may be
acknowledged.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
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
        asynchronous: save in the background (see the module docstring). False: each
            save is complete when :meth:`save` returns. A multi-process trainer saves
            so: a save's collectives must not run beside a training step's.
    """

    def __init__(self, directory: str | Path, *, keep: int = 2, asynchronous: bool = True) -> None:
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )
        self._pending: list[int] = []  # saved, not yet known to be committed
        self._asynchronous = asynchronous
        self._saver = ThreadPoolExecutor(1, thread_name_prefix="rlax-checkpoint")
        self._started: Future | None = None  # the newest save call, until it returned

    def latest_step(self) -> int | None:
        """The step of the newest complete checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Starts saving ``state`` and ``meta`` as the checkpoint of ``step``; returns at once.

        Call :meth:`ready` before changing or donating any array of ``state``.
        """
        self.ready()
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        self._pending.append(step)
        if not self._asynchronous:
            self._manager.save(step, args=args, force=True)
            self._manager.wait_until_finished()
            return
        self._started = self._saver.submit(self._manager.save, step, args=args, force=True)

    def ready(self) -> float:
        """Waits until the newest save holds its own copy of the arrays; returns the seconds.

        Raises:
            Exception: the save failed (Orbax's error).
        """
        if self._started is None:
            return 0.0
        started = time.monotonic()
        self._started.result()
        self._started = None
        return time.monotonic() - started

    def committed(self) -> list[int]:
        """The saved steps whose checkpoints have been committed since the last call.

        Raises:
            Exception: a background write failed (Orbax's error, re-raised here).
        """
        if not self._pending or (self._started is not None and not self._started.done()):
            return []
        self.ready()
        if self._manager.is_saving_in_progress():
            return []
        self._manager.check_for_errors()
        done, self._pending = self._pending, []
        return done

    def wait(self) -> list[int]:
        """Waits for every pending write; returns the steps committed since the last call."""
        self.ready()
        self._manager.wait_until_finished()
        return self.committed()

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
        self.wait()
        self._saver.shutdown()
        self._manager.close()
