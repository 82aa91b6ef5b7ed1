"""The verifier: lease sampled groups, judge them, send them on to the trainer.

With ``verifier.placement: stage`` inference workers put their groups, unjudged, on
the to-verify queue and go straight back to sampling; verifiers (threads of the
embedded run, or ``rlax train --role verifier`` processes on CPU machines) judge them.
A verifier is stateless like a worker:

* a group is leased while it is judged, so a killed verifier's groups come back to
  the queue when their lease runs out, and another verifier judges them;
* judged groups go on the rollout queue under the group's id, so a group judged twice
  (its lease ran out mid-judging) arrives once: the first copy wins, and no completion
  gets two different rewards in training;
* a group already too old to be trained on when it is leased (the newest published
  version is more than ``max_staleness`` past its own) is not judged: it goes on as it
  is, unjudged, for the controller to drop and count, so no sandbox time is spent on it
  and its slot is refilled at once.

A verifier process (:func:`run_verifier`) imports neither JAX nor the model: it needs the
judge, the tokenizer and the transport, so it starts in the time those take.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.contracts.queue import Queue
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import LeaseExpiredError, RlaxError
from rlax_core.judging import judge_isolated
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.plugins.manager import load_registry
from rlax_core.rl.roles import components, queues
from rlax_core.rl.roles.loop import LeasingLoop, lease_batch
from rlax_core.run_dir.layout import default_run_dir
from rlax_core.run_dir.status import write_status
from rlax_core.types.rollout import RolloutGroup

STATUS_EVERY_S = 5.0


class Verifier(LeasingLoop):
    """One verifier's loop; run it in a thread (embedded run) or as its own process.

    Args:
        verifier_id: name in rollout groups and status files.
        judge: decides rewards.
        tokenizer: decodes completions for the judge.
        store: the parameter store, read for the newest version (the staleness check).
        to_verify: where unjudged groups wait.
        rollouts: where judged groups go.
        max_staleness: the run's staleness bound ``k``.
        lease_s: how long a group is leased while it is judged.
        groups_per_batch: groups judged in one call of the judge.
    """

    def __init__(
        self,
        verifier_id: str,
        *,
        judge: Judge,
        tokenizer: Tokenizer,
        store: ParameterStore,
        to_verify: Queue,
        rollouts: Queue,
        max_staleness: int,
        lease_s: float,
        groups_per_batch: int,
    ) -> None:
        self.verifier_id = verifier_id
        self._judge = judge
        self._tokenizer = tokenizer
        self._store = store
        self._to_verify = to_verify
        self._rollouts = rollouts
        self._k = max_staleness
        self._lease_s = lease_s
        self._per_batch = groups_per_batch
        self.groups_done = 0
        self.completions_done = 0
        self.dropped_stale = 0
        self.busy_s = 0.0

    @property
    def name(self) -> str:
        return self.verifier_id

    def backlog(self) -> int:
        """Groups waiting to be judged (ready on the to-verify queue)."""
        return self._to_verify.stats().ready

    def step(self, stop: threading.Event | None = None) -> bool:
        """Judges one batch of leased groups; False if none arrived within the poll."""
        leases = lease_batch(self._to_verify, self._lease_s, self._per_batch)
        if not leases:
            return False
        started = time.monotonic()
        groups = [RolloutGroup.from_bytes(lease.payload) for lease in leases]
        latest = self._store.latest()
        newest = -1 if latest is None else latest.version
        fresh = [newest - g.policy_version <= self._k for g in groups]
        self.dropped_stale += fresh.count(False)
        problems, texts = [], []
        for group in (g for g, keep in zip(groups, fresh, strict=True) if keep):
            for rollout in group.rollouts:
                if rollout.verdict is not None:  # decided by its environment
                    continue
                problems.append(group.problem)
                texts.append(
                    self._tokenizer.decode(rollout.answer_tokens(), skip_special_tokens=True)
                )
        verdicts = iter(judge_isolated(self._judge, problems, texts))
        for group, lease, keep in zip(groups, leases, fresh, strict=True):
            if keep:
                n = len(group.rollouts)
                judged = tuple(
                    r if r.verdict is not None
                    else r.model_copy(update={"reward": (v := next(verdicts)).reward, "verdict": v})
                    for r in group.rollouts
                )  # fmt: skip
                group = group.model_copy(
                    update={"rollouts": judged, "verifier_id": self.verifier_id}
                )
                self.groups_done += 1
                self.completions_done += n
            self._rollouts.put(group.group_id, group.to_bytes())
            # An expired lease went to another verifier meanwhile; its copy is dropped by id.
            with contextlib.suppress(LeaseExpiredError):
                self._to_verify.ack(lease)
        self.busy_s += time.monotonic() - started
        return True


def verifier_of(
    verifier_id: str, config: RunConfigBase, judge: Judge, tokenizer: Tokenizer,
    transport: Transport,
) -> Verifier:  # fmt: skip
    """A verifier of the run on ``transport`` (a thread's or a process's)."""
    assert config.verifier is not None
    return Verifier(
        verifier_id,
        judge=judge,
        tokenizer=tokenizer,
        store=transport.parameter_store(),
        to_verify=transport.queue(queues.TO_VERIFY),
        rollouts=transport.queue(queues.ROLLOUTS),
        max_staleness=config.staleness.max_staleness,
        lease_s=config.rollout.lease_s,
        groups_per_batch=config.verifier.groups_per_batch,
    )


def run_verifier(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: str | Path | None,
    *,
    verifier_id: str,
    stop: threading.Event,
    working: threading.Event | None = None,
) -> None:
    """One verifier process (``verifier.placement: stage``); runs until ``stop``.

    It needs no accelerator and no model: the judge, the tokenizer and the transport.
    ``working`` is set when it starts leasing groups (see :func:`run_worker`).
    """
    registry = load_registry()
    run_dir = default_run_dir(config, run_dir)
    components.require_networked_transport("verifier", config)
    if not components.judged_by_stage(config):
        raise RlaxError(
            "a verifier process judges for the verifier stage, but verifier.placement is "
            "inline (workers judge their own completions); set verifier.placement: stage"
        )
    transport = components.build_transport(registry, config, run_dir)
    judge = components.build_judge(registry, config, run_dir)
    tokenizer = components.load_tokenizer(config, config_dir)
    verifier = verifier_of(verifier_id, config, judge, tokenizer, transport)
    reporter = threading.Thread(target=_report, args=(verifier, run_dir, stop), daemon=True)
    reporter.start()
    if working is not None:
        working.set()
    try:
        verifier.run(stop)
    finally:
        judge.close()
        transport.close()


def _report(verifier: Verifier, run_dir: Path, stop: threading.Event) -> None:
    while not stop.wait(STATUS_EVERY_S):
        rate = verifier.completions_done / verifier.busy_s if verifier.busy_s else 0.0
        write_status(run_dir, verifier.verifier_id, {
            "role": "verifier", "groups": verifier.groups_done,
            "dropped_stale": verifier.dropped_stale, "backlog": verifier.backlog(),
            "throughput": {"completions_per_s": rate},
        })  # fmt: skip
