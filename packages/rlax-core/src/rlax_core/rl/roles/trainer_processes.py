"""The processes of one trainer under ``jax.distributed``: who leads, and how they agree.

A multi-host trainer is N processes running the same program (SPMD). Every process
holds its shards of the parameters and optimiser state on the global mesh and runs the
same jitted steps; XLA's collectives (gloo on CPU, ICI/DCN on TPU) reduce the gradients.
Only the **leader** (process 0) talks to the outside world: it runs the controller (the
prompt and rollout queues), publishes weights, evaluates, and writes metrics, status and
the checkpoint's JSON part. Each step the leader shares the step's rollout groups (the
same JSON records that crossed the rollout queue) with the others, so every process
builds the identical batch.

**Agreement.** While the leader waits for rollouts, all processes meet in a small
collective every :data:`AGREE_EVERY_S`: each says whether it was asked to stop (SIGTERM
or SIGINT), the leader says whether it has the step's batch. All processes see the same
answers, so they train the same steps and leave the loop together — a stop asked of any
one process stops all of them at the next round (or after the step in progress), and
they write the final checkpoint collectively.

**A process that dies** (SIGKILL, out of memory) cannot take part in collectives. The
others fail in their next collective when the dead peer's connection closes, or when the
``jax.distributed`` coordination service misses its heartbeats; either way they exit
with an error instead of waiting forever. Restart all the trainer's processes: they
resume from the last checkpoint.

**Publishing weights.** The parameter store takes one writer and one checksummed,
atomic version, so the leader publishes the whole model: every parameter is gathered to
the hosts one tensor at a time (:func:`host_params`), which bounds the extra device
memory by the largest tensor. Each process publishing its own shards would need a
multi-writer commit in the store contract, for a saving that matters only when the
gather, not the step, dominates.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils

from rlax_core.types.rollout import RolloutGroup

# How often the processes meet while the leader waits for rollouts: a stop asked of one
# of them reaches the others within this (plus a train step).
AGREE_EVERY_S = 1.0


class TrainerProcesses:
    """This process's place among the trainer's processes (one, without jax.distributed)."""

    def __init__(self) -> None:
        self.count = jax.process_count()
        self.index = jax.process_index()

    @property
    def is_leader(self) -> bool:
        """Whether this process talks to the queues, the store and the run directory."""
        return self.index == 0

    @property
    def distributed(self) -> bool:
        """Whether the trainer spans more than one process."""
        return self.count > 1

    def next_batch(
        self,
        wait_for_batch: Callable[[Callable[[], bool]], list[RolloutGroup] | None] | None,
        stop: threading.Event,
    ) -> tuple[list[RolloutGroup] | None, bool]:
        """The step's rollout groups, the same on every process, and whether to stop.

        Args:
            wait_for_batch: on the leader, waits for the batch until its argument (a
                ``should_stop`` callable) returns True, then returns the groups or None
                (the controller's ``next_batch``); None on the other processes.
            stop: this process's stop request.

        Returns:
            (groups, stopping): groups is None when there is nothing to train; stopping
            is True when some process asked to stop — the same answer on every process.
        """
        if not self.distributed:
            groups = wait_for_batch(stop.is_set)
            return groups, stop.is_set()
        while True:
            groups, stopping = self._round(wait_for_batch, stop)
            if groups is not None or stopping:
                return groups, stopping

    def _round(self, wait_for_batch, stop: threading.Event) -> tuple[list | None, bool]:
        """One meeting: the leader waits up to AGREE_EVERY_S, then all exchange news."""
        groups = None
        if self.is_leader:
            deadline = time.monotonic() + AGREE_EVERY_S
            groups = wait_for_batch(lambda: stop.is_set() or time.monotonic() > deadline)
        payload = b"" if groups is None else _encode(groups)
        header = np.array([int(stop.is_set()), len(payload)], np.int32)
        headers = np.asarray(multihost_utils.process_allgather(header))  # (count, 2)
        stopping = bool(headers[:, 0].any())
        size = int(headers[0, 1])
        if not size:
            return None, stopping
        # Every process passes an array of the same shape; only the leader's counts.
        data = np.frombuffer(payload, np.uint8) if self.is_leader else np.zeros(size, np.uint8)
        shared = multihost_utils.broadcast_one_to_all(data)
        return (groups if self.is_leader else _decode(shared.tobytes())), stopping

    def share(self, value: int) -> int:
        """The leader's ``value`` on every process (e.g. the policy version after a restart)."""
        if not self.distributed:
            return value
        return int(multihost_utils.broadcast_one_to_all(np.int32(value)))

    def host_params(self, params: Mapping[str, jax.Array]) -> dict[str, np.ndarray | jax.Array]:
        """The full value of every parameter, on the host (collective when distributed).

        With one process the arrays are returned as they are (the store reads them).
        """
        if not self.distributed:
            return dict(params)
        return {name: host_array(array) for name, array in params.items()}


def host_array(array: jax.Array) -> np.ndarray:
    """The full value of a (possibly multi-process) array; every process must call it."""
    if array.is_fully_addressable:
        return np.asarray(jax.device_get(array))
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def _encode(groups: list[RolloutGroup]) -> bytes:
    # JSON lines: a record's JSON never holds a raw newline.
    return b"\n".join(group.to_bytes() for group in groups)


def _decode(data: bytes) -> list[RolloutGroup]:
    return [RolloutGroup.from_bytes(line) for line in data.split(b"\n")]
