"""The controller: issues prompt groups under the staleness bound and assembles batches.

Accounting, the rules that keep an asynchronous run honest:

* **In flight.** At most ``prompts_per_step × (k + 1)`` groups are issued but not yet
  trained on. A group issued while the trainer is at version ``v`` asks for weights of
  version ≥ ``v`` (``min_policy_version``), so it cannot arrive more than ``k`` versions
  old unless a worker sat on it — and then the staleness check drops it.
* **Staleness check.** A rollout group of version ``u`` is trained at version ``v`` only
  if ``v − u ≤ k``; older ones are dropped, counted, and their slot refilled.
* **At most once.** A group id that was already trained (or is already waiting) is a
  duplicate and is dropped.
* **No reward without a judgement.** A completion the judge could not judge (SE after
  its retries, or IE) has no reward and is left out of the loss, and counted; a group
  with no judged completion at all is dropped and counted, and its slot refilled.
* **Nothing lost.** Consumed rollouts stay leased until a checkpoint holding their
  training is written (:meth:`acknowledge_trained`); groups in flight are part of the
  checkpoint and re-issued on resume (the queues drop duplicates by id).
* **Short leases, renewed.** The trainer holds rollouts under leases of
  ``rollout.lease_s``, renewed from a thread once half of each has gone
  (a :class:`~rlax_core.rl.roles.lease_keeper.LeaseKeeper`), however long a training
  step, a first compile or a checkpoint takes. A trainer that is killed loses its
  leases within ``lease_s``, so its successor gets those rollouts back promptly. A held
  group delivered again (its lease ran out, or the transport server restarted and
  forgot the leases) is held under the new delivery instead of being acked: until a
  checkpoint covers it, it must stay in the queue.
* **Ids never reused.** A group id carries the version it was issued at, so a trainer
  restarted from a checkpoint never reissues, as new, an id its predecessor used after
  that checkpoint.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass

from rlax_core.config.sections import AlgorithmSection, RolloutSection, StalenessSection
from rlax_core.contracts.queue import Queue
from rlax_core.errors import LeaseExpiredError, RlaxError
from rlax_core.rl.algorithms.batch import has_signal
from rlax_core.rl.roles.lease_keeper import LeaseKeeper
from rlax_core.types.lease import Lease
from rlax_core.types.rollout import PromptGroup, RolloutGroup


@dataclass
class Accounting:
    """Counts across the run (checkpointed; logged every step)."""

    issued: int = 0
    trained: int = 0
    dropped_stale: int = 0
    dropped_no_signal: int = 0
    duplicates: int = 0
    replaced: int = 0  # restored groups that never came back, issued again under new ids
    dropped_unjudged: int = 0  # groups of which no completion could be judged (SE / IE)
    unjudged_rollouts: int = 0  # completions without a judgement, left out of the loss

    def as_metrics(self) -> dict[str, float]:
        """The counters as metrics."""
        return {
            "groups/issued": float(self.issued),
            "groups/trained": float(self.trained),
            "staleness/dropped": float(self.dropped_stale),
            "groups/dropped_no_signal": float(self.dropped_no_signal),
            "groups/duplicates": float(self.duplicates),
            "groups/replaced": float(self.replaced),
            "groups/dropped_unjudged": float(self.dropped_unjudged),
            "rollouts/unjudged": float(self.unjudged_rollouts),
        }


@dataclass
class _Waiting:
    group: RolloutGroup
    prompt: PromptGroup  # what was issued, to re-issue it on resume


class Controller:
    """Issues prompt groups and turns arriving rollout groups into training batches.

    Args:
        next_prompt: returns the next (example id, prompt token ids, problem) to issue.
        prompts / rollouts: the queues groups are issued on and arrive from.
        rollout, staleness, algorithm: the run config's sections.
        to_verify: the verifier stage's queue, when there is one: groups waiting there
            are still in flight (issued, not arrived); its backlog is a metric.
    """

    def __init__(
        self,
        next_prompt,
        *,
        prompts: Queue,
        rollouts: Queue,
        rollout: RolloutSection,
        staleness: StalenessSection,
        algorithm: AlgorithmSection,
        to_verify: Queue | None = None,
    ) -> None:
        self._next_prompt = next_prompt
        self._prompts = prompts
        self._rollouts = rollouts
        self._to_verify = to_verify
        self._per_step = rollout.prompts_per_step
        self._samples = rollout.samples_per_prompt
        self._k = staleness.max_staleness
        self._dynamic_sampling = algorithm.dynamic_sampling
        self._lease_s = rollout.lease_s
        self.next_index = 0
        self.outstanding: dict[str, PromptGroup] = {}  # issued, not yet arrived
        self.waiting: dict[str, _Waiting] = {}  # arrived, not yet trained
        self.trained_ids: set[str] = set()
        self.held: set[str] = set()  # trained, acked after the next checkpoint
        # The leases of the waiting and held groups' rollouts, by group id.
        self._leases = LeaseKeeper(rollouts, self._lease_s)
        self.accounting = Accounting()
        self._restored: set[str] = set()  # re-issued on resume, not yet arrived
        self._restored_deadline = 0.0

    @property
    def in_flight(self) -> int:
        """Groups issued and not yet trained (outstanding + waiting)."""
        return len(self.outstanding) + len(self.waiting)

    def issue(self, version: int) -> int:
        """Issues groups up to the in-flight limit; returns how many were issued."""
        limit = self._per_step * (self._k + 1)
        issued = 0
        while self.in_flight < limit:
            example_id, tokens, problem = self._next_prompt()
            group = PromptGroup(
                group_id=self._new_group_id(version),
                prompt_id=example_id,
                prompt_tokens=tuple(tokens),
                problem=problem,
                samples_per_prompt=self._samples,
                min_policy_version=version,
            )
            self._prompts.put(group.group_id, group.to_bytes())
            self.outstanding[group.group_id] = group
            self.accounting.issued += 1
            issued += 1
        return issued

    def next_batch(
        self,
        version: int,
        *,
        timeout_s: float | None = None,
        should_stop=None,
    ) -> list[RolloutGroup] | None:
        """Waits for ``prompts_per_step`` trainable groups and returns them in issue order.

        Args:
            version: the trainer's current policy version.
            timeout_s: give up after this long without a batch (None: wait forever).
            should_stop: a callable; when it returns True, return None.

        Returns:
            The groups, or None if stopped.

        Raises:
            RlaxError: ``timeout_s`` passed without enough rollouts (workers stuck or gone).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._replace_lost(version)
            self._drop_stale(version)
            if len(self.waiting) >= self._per_step:
                return self._take(version)
            self.issue(version)
            if should_stop is not None and should_stop():
                return None
            if deadline is not None and time.monotonic() > deadline:
                raise RlaxError(
                    f"no batch after {timeout_s:.0f} s: {len(self.waiting)} of "
                    f"{self._per_step} rollout groups arrived ({len(self.outstanding)} "
                    "outstanding); are the inference workers running?"
                )
            lease = self._rollouts.get(self._lease_s, timeout=0.2)
            if lease is not None:
                self._receive(lease, version)

    def _receive(self, lease: Lease, version: int) -> None:
        group = RolloutGroup.from_bytes(lease.payload)
        gid = group.group_id
        if gid in self.held or gid in self.waiting:
            # Our lease on it ended; keep the copy under the new lease (see the module doc).
            self.accounting.duplicates += 1
            self._leases.hold(gid, lease)
            return
        if gid in self.trained_ids or gid not in self.outstanding:
            self.accounting.duplicates += 1
            self._ack(lease)
            return
        prompt = self.outstanding.pop(gid)
        if version - group.policy_version > self._k:
            self.accounting.dropped_stale += 1
            self._ack(lease)
            return
        unjudged = sum(r.reward is None for r in group.rollouts)
        self.accounting.unjudged_rollouts += unjudged
        if unjudged == len(group.rollouts):  # nothing to learn from; another prompt replaces it
            self.accounting.dropped_unjudged += 1
            self._ack(lease)
            return
        if self._dynamic_sampling and not has_signal(group):
            self.accounting.dropped_no_signal += 1
            self._ack(lease)
            return
        self.waiting[gid] = _Waiting(group, prompt)
        self._leases.hold(gid, lease)

    def _drop_stale(self, version: int) -> None:
        for gid in [
            g for g, w in self.waiting.items() if version - w.group.policy_version > self._k
        ]:
            self.accounting.dropped_stale += 1
            del self.waiting[gid]
            self._ack(self._leases.release(gid))

    def _take(self, version: int) -> list[RolloutGroup]:
        chosen = sorted(self.waiting)[: self._per_step]  # issue order: deterministic batches
        batch = []
        for gid in chosen:
            batch.append(self.waiting.pop(gid).group)
            self.held.add(gid)
            self.trained_ids.add(gid)
        self.accounting.trained += len(batch)
        return batch

    def staleness_metrics(self, batch: list[RolloutGroup], version: int) -> dict[str, float]:
        """Staleness of a batch about to be trained at ``version``."""
        ages = [version - g.policy_version for g in batch]
        # Per trained token: with in-flight updates a completion's tokens have their own
        # versions, and the group's is its oldest.
        token_ages = [
            version - v
            for g in batch
            for r in g.rollouts
            for v in r.token_versions or [g.policy_version] * len(r.completion_tokens)
        ]
        metrics = {
            "staleness/max": float(max(ages)),
            "staleness/mean": float(sum(ages) / len(ages)),
            "staleness/token_mean": sum(token_ages) / max(1, len(token_ages)),
            "staleness/on_policy_token_fraction": token_ages.count(0) / max(1, len(token_ages)),
            "groups/in_flight": float(self.in_flight),
        }
        if self._to_verify is not None:
            waiting = self._to_verify.stats()
            metrics["groups/awaiting_verification"] = float(waiting.ready + waiting.leased)
        return metrics

    def acknowledge_trained(self, group_ids: Collection[str] | None = None) -> None:
        """Acks trained rollouts; call only once a committed checkpoint includes them.

        Args:
            group_ids: the groups that checkpoint covers (those held when it was
                saved); None: every group held now.
        """
        for gid in sorted(self.held) if group_ids is None else group_ids:
            if gid in self.held:
                self.held.remove(gid)
                self._ack(self._leases.release(gid))

    def close(self) -> None:
        """Stops renewing the leases held (the rollouts come back to the queue as they
        run out, for a successor that resumes from the last checkpoint)."""
        self._leases.close()

    def state(self) -> dict:
        """The controller's part of a checkpoint (JSON)."""
        return {
            "next_index": self.next_index,
            "in_flight": [g.model_dump(mode="json") for g in self._in_flight_groups()],
            "trained_ids": sorted(self.trained_ids),
            "accounting": self.accounting.__dict__.copy(),
        }

    def restore(self, state: dict) -> None:
        """Resumes from :meth:`state`: groups in flight are issued again (same ids)."""
        self.next_index = state["next_index"]
        self.trained_ids = set(state["trained_ids"])
        self.accounting = Accounting(**state["accounting"])
        for data in state["in_flight"]:
            group = PromptGroup.model_validate(data)
            self._prompts.put(group.group_id, group.to_bytes())  # a duplicate if still queued
            self.outstanding[group.group_id] = group
            self._restored.add(group.group_id)
        self._restored_deadline = time.monotonic() + 2 * self._lease_s

    def _replace_lost(self, version: int) -> None:
        """Issues again, under new ids, restored groups that did not come back in time.

        A group the previous trainer process dropped (stale) or whose rollouts it acked
        after its last checkpoint is gone from the queues, and putting its id again is a
        duplicate put, which the queues ignore. Once every lease the dead process held
        has expired (one ``lease_s``, doubled for margin), a restored group still missing
        is given up: the same prompt goes out as a new group, and a late copy of the old
        one is dropped as a duplicate.
        """
        self._restored &= self.outstanding.keys()
        if not self._restored or time.monotonic() < self._restored_deadline:
            return
        for gid in sorted(self._restored):
            lost = self.outstanding.pop(gid)
            group = lost.model_copy(
                update={"group_id": self._new_group_id(version), "min_policy_version": version}
            )
            self._prompts.put(group.group_id, group.to_bytes())
            self.outstanding[group.group_id] = group
            self.accounting.replaced += 1
        self._restored.clear()

    def _new_group_id(self, version: int) -> str:
        """A group id never used before in this run, by this trainer process or another.

        The index alone is not enough: a trainer killed after its last checkpoint had
        issued groups past the checkpoint's ``next_index``. Its successor, restored to
        that index, would reuse those ids: the prompt queue drops the puts as duplicates,
        and the dead trainer's rollouts under them are stale or already gone, so a batch
        would never fill. The issuing version tells them apart: a successor starts at a
        version above every one published before it (versions are never reused). The
        index comes first, so ids sort in issue order.
        """
        group_id = f"g{self.next_index:09d}-v{version}"
        self.next_index += 1
        return group_id

    def _in_flight_groups(self) -> list[PromptGroup]:
        # An arrived group is re-issued on resume too: its rollouts may be lost with the
        # process (in-process queues), and its id keeps a redelivered copy single.
        groups = [*self.outstanding.values(), *(w.prompt for w in self.waiting.values())]
        return sorted(groups, key=lambda g: g.group_id)

    def _ack(self, lease: Lease) -> None:
        # An expired lease is redelivered later, and dropped then as a duplicate.
        with contextlib.suppress(LeaseExpiredError):
            self._rollouts.ack(lease)
