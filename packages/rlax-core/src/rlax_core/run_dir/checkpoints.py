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

Where checkpoints live: a local folder, or Cloud Storage, which Orbax (through
TensorStore's own GCS driver) writes directly, every host its shards, committing each
step with a ``commit_success.txt`` written last. Orbax has no S3 driver: for ``s3://``
each step is written to a local staging folder and, once committed there, uploaded
file by file with a ``COMMITTED`` object written last; only steps with that object
count, so a half-uploaded step is never resumed from. A resume downloads the step
first. That path needs a single-process trainer (a multi-host save must see one shared
folder): use ``gs://``, or an S3 bucket mounted on every host, for more.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from rlax_core.errors import ConfigError, RlaxError
from rlax_core.storage import (
    AnyPath,
    cache_dir,
    download_tree,
    filesystem,
    remote_scheme,
    storage_path,
    upload_tree,
)

COMMITTED = "COMMITTED"  # written last into an uploaded step (s3://)


class CheckpointStore:
    """The checkpoints of one run directory.

    Args:
        directory: where step directories are written (``RUN_DIR/checkpoints``): local,
            ``gs://…`` or ``s3://…`` (see the module docstring).
        keep: how many of the newest checkpoints to keep.
        asynchronous: save in the background (see the module docstring). False: each
            save is complete when :meth:`save` returns. A multi-process trainer saves
            so: a save's collectives must not run beside a training step's.
    """

    def __init__(
        self, directory: str | AnyPath, *, keep: int = 2, asynchronous: bool = True
    ) -> None:
        directory = storage_path(directory) if isinstance(directory, str) else directory
        self.directory = directory if remote_scheme(directory) else Path(directory).absolute()
        self._uploads: _Uploads | None = None
        local: AnyPath = self.directory
        if remote_scheme(directory) == "s3":
            if jax.process_count() > 1:
                raise ConfigError(
                    f"run.run_dir {directory.parent}: a trainer of {jax.process_count()} "
                    "processes cannot checkpoint to s3:// (Orbax writes there through one "
                    "local folder); use a gs:// run directory, or mount the bucket on every host"
                )
            self._uploads = _Uploads(directory, keep=keep)
            local = self._uploads.staging
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self._manager = ocp.CheckpointManager(local, options=options, item_names=("state", "meta"))
        self._pending: list[int] = []  # saved, not yet known to be committed
        self._asynchronous = asynchronous
        self._saver = ThreadPoolExecutor(1, thread_name_prefix="rlax-checkpoint")
        self._started: Future | None = None  # the newest save call, until it returned

    def latest_step(self) -> int | None:
        """The step of the newest complete checkpoint, or None."""
        if self._uploads is not None:
            return self._uploads.latest_step()
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
        done: list[int] = []
        if self._pending and (self._started is None or self._started.done()):
            self.ready()
            if not self._manager.is_saving_in_progress():
                self._manager.check_for_errors()
                done, self._pending = self._pending, []
        if self._uploads is None:
            return done
        for step in done:  # committed in the bucket once uploaded
            self._uploads.start(step)
        return self._uploads.finished()

    def wait(self) -> list[int]:
        """Waits for every pending write; returns the steps committed since the last call."""
        self.ready()
        self._manager.wait_until_finished()
        done = self.committed()
        if self._uploads is not None:
            done += self._uploads.wait()
        return done

    def restore(self, state_like: Any, step: int | None = None) -> tuple[Any, dict]:
        """Reads a checkpoint into arrays shaped and sharded like ``state_like``.

        Raises:
            RlaxError: there is no checkpoint, or it does not fit ``state_like`` (a run
                directory of a different model).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise RlaxError(f"no checkpoint in {self.directory}")
        if self._uploads is not None:
            self._uploads.download(step)
            self._manager.reload()
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
        if self._uploads is not None:
            self._uploads.close()


class _Uploads:
    """Committed steps of a local staging folder, uploaded to an ``s3://`` folder.

    One step is uploaded at a time, in the background; a step counts as committed in the
    bucket once its ``COMMITTED`` object, written after every other file, is there.
    Steps past the newest ``keep`` are deleted from the bucket after an upload.
    """

    def __init__(self, remote: AnyPath, *, keep: int) -> None:
        self.remote = remote
        self.keep = keep
        key = hashlib.sha256(str(remote).encode()).hexdigest()[:16]
        self.staging = cache_dir() / "checkpoints" / f"{key}-{os.getpid()}"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True)
        self._fs = filesystem(remote)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rlax-checkpoint-upload")
        self._running: dict[int, Future] = {}

    def steps(self) -> list[int]:
        """The committed steps in the bucket, oldest first."""
        markers = self._fs.glob(f"{self.remote}/*/{COMMITTED}")
        steps = [m.rstrip("/").split("/")[-2] for m in markers]
        return sorted(int(s) for s in steps if s.isdigit())

    def latest_step(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def start(self, step: int) -> None:
        self._running[step] = self._executor.submit(self._upload, step)

    def _upload(self, step: int) -> None:
        upload_tree(self.staging / str(step), self.remote / str(step))
        (self.remote / str(step) / COMMITTED).write_text(str(time.time()))
        for old in self.steps()[: -self.keep]:
            self._fs.rm(f"{self.remote}/{old}", recursive=True)

    def finished(self) -> list[int]:
        """The steps uploaded since the last call.

        Raises:
            Exception: an upload failed (the store's error).
        """
        done = sorted(step for step, future in self._running.items() if future.done())
        for step in done:
            self._running.pop(step).result()
        return done

    def wait(self) -> list[int]:
        for future in list(self._running.values()):
            future.result()
        return self.finished()

    def download(self, step: int) -> None:
        """Makes the staging folder hold ``step`` as the bucket has it."""
        local = self.staging / str(step)
        if not local.exists():
            download_tree(self.remote / str(step), self.staging / f".{step}.download")
            (self.staging / f".{step}.download" / COMMITTED).unlink(missing_ok=True)
            os.replace(self.staging / f".{step}.download", local)

    def close(self) -> None:
        self.wait()
        self._executor.shutdown()
        shutil.rmtree(self.staging, ignore_errors=True)
