"""The streaming inference worker: keeps the rollout engine full, sends groups as they end.

With ``rollout.engine.kind: paged`` a worker does not sample a batch at a time. It holds
up to ``groups_in_flight`` prompt groups leased, submits each to the engine
(:class:`rlax_core.generate.paged.Engine`) as it arrives, steps the engine, and sends
each group the moment all its samples have finished, judged here or (verifier stage) to
be judged, while the others go on decoding. Leases of groups still generating are
renewed from a thread before they run out (a
:class:`~rlax_core.rl.roles.lease_keeper.LeaseKeeper`), so neither a long completion nor
a long step (a first compile, a large model's weights pulled) loses its group; a worker
killed mid-generation loses only its groups in flight, which come back through their
leases as today.

New weights are taken between groups: once a pull is due (the store ``pull_every``
versions ahead, or a leased group needs a newer version), no new group is submitted;
the groups in flight finish with the weights that started them, then the worker pulls
and goes on. Every completion of a group is thus sampled by one version, and a group
regenerated with the same weights gives the same completions (the engine's completions
depend only on weights, prompt and seed).

With ``rollout.in_flight_updates`` (partial rollouts, as PipelineRL does) the worker
instead swaps weights between two engine steps once a pull is due, and the sequences in
flight go on over the keys and values the older weights computed. Each token records
the version that sampled it (``Rollout.token_versions``), the group's
``policy_version`` is its oldest token's, so the staleness bound holds for every token,
and the trainer's importance ratios use each token's own behaviour log-probability.

With an environment that answers the model's turns (``environment: {type: tools}``, or
a plugin's), each sample is a multi-turn episode (:mod:`rlax_core.rl.roles.episodes`):
it pauses in the engine at each turn's end while its environment step runs on a thread
pool, and goes on from its cached prefix with the reply appended; the group is sent
once every sample's episode has ended. The judge decides on each rollout's last model
turn, unless its environment gave the reward.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlax_core.config.sections import RolloutSection
from rlax_core.contracts.environment import Environment
from rlax_core.errors import ConfigError, LeaseExpiredError
from rlax_core.generate import Sampler
from rlax_core.generate.paged import Engine, Request, Sample, paged_attention
from rlax_core.generate.paged.ragged_kernel import ragged_kernel_attention
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.episodes import Episodes, environment_verdict
from rlax_core.rl.roles.lease_keeper import LeaseKeeper
from rlax_core.rl.roles.loop import POLL_S
from rlax_core.rl.roles.rollout_groups import deliver, judge_completions, logprob_gaps, pack_group
from rlax_core.rl.roles.worker import RolloutWorker, sample_seed
from rlax_core.types.rollout import PromptGroup


def engine_for(model: Qwen, rollout: RolloutSection, *, pad_token_id: int) -> Engine:
    """The rollout engine ``rollout.engine`` describes, for sequences of at most
    ``max_prompt_tokens`` prompt and ``rollout.max_new_tokens`` new tokens."""
    cfg = rollout.engine
    return Engine(
        model, slots=cfg.slots, block_size=cfg.block_size,
        max_sequence_tokens=cfg.max_prompt_tokens + rollout.max_new_tokens,
        kv_tokens=cfg.kv_tokens, prefill_chunk=cfg.prefill_chunk,
        decode_burst=cfg.decode_burst, pad_token_id=pad_token_id,
        contiguous_bursts=cfg.contiguous_bursts,
        attention=ragged_kernel_attention() if cfg.attention == "pallas" else paged_attention,
    )  # fmt: skip


@dataclass
class _InFlight:
    """A leased group (its lease in the worker's keeper), submitted to the engine or
    waiting for newer weights."""

    group: PromptGroup
    submitted_at: float | None = None
    checked: bool = False  # its log-probabilities are re-scored by teacher forcing


class StreamingWorker(RolloutWorker):
    """One streaming worker's loop. ``model``: the policy's structure (and initial
    weights, replaced by the store's); ``environment``: what answers the model's turns
    (None: single-turn); the other arguments are :class:`RolloutWorker`'s.

    Raises (from :meth:`step`):
        ConfigError: a prompt longer than ``rollout.engine.max_prompt_tokens`` allows.
    """

    def __init__(
        self,
        worker_id: str,
        *,
        model: Qwen,
        tokenizer: Tokenizer,
        environment: Environment | None = None,
        **parts: Any,
    ) -> None:
        super().__init__(worker_id, tokenizer=tokenizer, **parts)
        pad = tokenizer.pad_token_id or 0
        self._engine = engine_for(model, self._cfg, pad_token_id=pad)
        self._episodes = None
        if environment is not None and environment.multi_turn:
            self._episodes = Episodes(self._engine, environment, tokenizer, self._cfg.turns)
        # Teacher forcing for the log-probability check; it shares the engine's arrays.
        self._scorer = Sampler(model, pad_token_id=pad) if self._cfg.logprob_check_groups else None
        self._groups: dict[str, _InFlight] = {}
        self._leases = LeaseKeeper(self._prompts, self._cfg.lease_s)  # by group id
        self._sent = 0

    def status(self) -> dict[str, Any]:
        """The fields of this worker's status file (``rlax status``, the trainer's
        metrics): the batch worker's, useful tokens/s and the engine's occupancy."""
        scheduler, pool = self._engine.scheduler, self._engine.pool
        stats, slots = scheduler.stats, self._engine.slots
        status = super().status()
        status["throughput"]["useful_tokens_per_s"] = (
            stats.decoded_tokens / self.busy_s if self.busy_s else 0.0
        )
        status["engine"] = {
            "slots": slots, "running": scheduler.running,
            "slot_occupancy": stats.busy_slot_steps / max(1, stats.steps * slots),
            "steps_per_launch": stats.steps / max(1, stats.launches),
            "tokens_in_flight": scheduler.tokens_in_flight, "kv_blocks_used": pool.used,
            "kv_blocks": pool.capacity, "preemptions": stats.preemptions,
            "admission_waits": stats.admission_waits, "recomputed": stats.recomputed,
            "groups_in_flight": len(self._groups), "turns": stats.turns,
            "environment_steps_running": self._episodes.waiting if self._episodes else 0,
        }  # fmt: skip
        return status

    def step(self, stop: threading.Event | None = None) -> bool:
        """Tops the engine up with leased groups and runs one engine step; False if
        nothing was in flight and no group arrived within the poll."""
        self._admit(stop)
        if self._engine.scheduler.idle:
            return bool(self._groups)
        started = time.monotonic()
        finished = self._engine.step()
        if self._episodes is not None:
            if not self._engine.scheduler.busy:  # every sample waits for its environment
                self._episodes.wait(POLL_S)
            finished += self._episodes.advance()
        for request, samples in finished:
            self._finish(request.request_id, samples)
        self.busy_s += time.monotonic() - started
        return True

    def close(self) -> None:
        """Gives back the leases of groups not sent (another worker takes them at once)."""
        for lease in self._leases.close().values():
            with contextlib.suppress(LeaseExpiredError):  # it went to another worker
                self._prompts.nack(lease)
        self._groups.clear()
        if self._episodes is not None:
            self._episodes.close()

    def run(self, stop: threading.Event, on_error=None) -> None:
        try:
            super().run(stop, on_error)
        finally:
            self.close()

    # -- admission --

    def _admit(self, stop: threading.Event | None) -> None:
        """Leases groups while there is room, and submits those the weights allow."""
        while self._has_room():
            # With nothing held, wait a poll for work; otherwise only take what is there.
            lease = self._prompts.get(self._cfg.lease_s, timeout=0 if self._groups else POLL_S)
            if lease is None:
                break
            group = PromptGroup.from_bytes(lease.payload)
            self._leases.hold(group.group_id, lease)
            # A group whose lease ran out (the queue away longer than half a lease) may
            # come back to this worker still generating it: not submitted twice.
            self._groups.setdefault(group.group_id, _InFlight(group))
        waiting = [g for g in self._groups.values() if g.submitted_at is None]
        if self._cfg.in_flight_updates and not self._engine.scheduler.idle:
            # Swap between two steps, the sequences in flight keeping their KV cache.
            if self._policy.due(0, max_age_s=POLL_S):
                self._policy.ensure(0, stop)  # a newer version exists: no wait
            version = self.version
            assert version is not None
            for held in waiting:
                if held.group.min_policy_version <= version:
                    self._submit(held)
            return
        if not waiting:
            return
        needed = max(g.group.min_policy_version for g in waiting)
        if self._policy.due(needed, max_age_s=POLL_S):
            if not self._engine.scheduler.idle:
                return  # the groups in flight finish with their weights first
            if not self._policy.ensure(needed, stop):
                return
        for held in waiting:
            self._submit(held)

    def _has_room(self) -> bool:
        """Whether to lease another group: fewer than ``groups_in_flight`` held, or
        (unset) fewer samples held than twice the slots, so that a finishing sequence's
        slot finds a prefilled successor."""
        if self._cfg.engine.groups_in_flight is not None:
            return len(self._groups) < self._cfg.engine.groups_in_flight
        held = sum(g.group.samples_per_prompt for g in self._groups.values())
        return held < 2 * self._cfg.engine.slots

    def _submit(self, held: _InFlight) -> None:
        group = held.group
        longest = self._cfg.engine.max_prompt_tokens
        if len(group.prompt_tokens) > longest:
            raise ConfigError(
                f"prompt group {group.group_id!r} has {len(group.prompt_tokens)} prompt "
                f"tokens; rollout.engine.max_prompt_tokens is {longest}: raise it"
            )
        seeds = tuple(sample_seed(self._seed, group.group_id, j)
                      for j in range(group.samples_per_prompt))  # fmt: skip
        request = Request(
            group.group_id,
            tuple(group.prompt_tokens),
            seeds,
            self._sampling.max_new_tokens,
            frozenset(self._sampling.stop_token_ids),
        )
        if self._episodes is not None:
            request = self._episodes.request(request, group.problem)
        self._engine.submit([request], self._sampling)
        held.submitted_at = time.monotonic()
        # Of every groups_per_batch groups, the first logprob_check_groups are re-scored.
        held.checked = self._sent % self._cfg.groups_per_batch < self._cfg.logprob_check_groups
        self._sent += 1

    # -- results --

    def _finish(self, group_id, samples: list[Sample]) -> None:
        held = self._groups.pop(group_id)
        group = held.group
        assert held.submitted_at is not None
        tokens = [s.tokens for s in samples]
        policy = [s.policy_logprobs for s in samples]
        sampled = [s.sampled for s in samples]
        versions = {
            v for s in samples for v, mine in zip(s.versions, s.sampled, strict=True) if mine
        }
        version = min(versions)
        gaps: list[float | None] = [None] * len(samples)
        # The check re-scores with the weights held now: for groups of that version only.
        if held.checked and self._scorer is not None and versions == {self.version}:
            prompts = [group.prompt_tokens] * len(samples)
            gaps = logprob_gaps(self._scorer, prompts, tokens, policy,
                                self._sampling.temperature, sampled)  # fmt: skip
        endings = [None] * len(samples)
        if self._episodes is not None:
            endings = [self._episodes.ending(group_id, s.index) for s in samples]
        decided = [e is not None and (e.reward is not None or e.failed) for e in endings]
        answers = [s.last_turn for s, done in zip(samples, decided, strict=True) if not done]
        judged = iter(judge_completions(self._judge, self._tokenizer,
                                        [group.problem] * len(answers), answers))  # fmt: skip
        verdicts = [environment_verdict(e) if done else next(judged)
                    for e, done in zip(endings, decided, strict=True)]  # fmt: skip
        result = pack_group(
            group, worker_id=self.worker_id, version=version, tokens=tokens,
            behaviour_logprobs=[s.behaviour_logprobs for s in samples], policy_logprobs=policy,
            finish_reasons=[s.finish_reason or "length" for s in samples],
            verdicts=verdicts, gaps=gaps, generation_s=time.monotonic() - held.submitted_at,
            token_versions=[s.versions for s in samples], sampled=sampled,
            end_reasons=[e.reason if e is not None else None for e in endings],
        )  # fmt: skip
        deliver(self._outbox, self._prompts, result, self._leases.release(group_id))
        self.groups_done += 1
        self.samples_done += len(samples)

    def _load(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        self._engine.set_params(arrays, in_place=True, version=version)  # a version never changes
        if self._cfg.engine.recompute_on_swap:  # mid-flight: the keys of the new weights
            self._engine.recompute()
        if self._scorer is not None:
            self._scorer.set_params(arrays, in_place=True)


def engine_metrics(statuses: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The trainer's ``rollout_engine/*`` metrics from its workers' status files: sums
    over the streaming workers, and their mean slot occupancy and decode steps per call
    to the device ({} if there are none)."""
    engines = [s for s in statuses if s.get("role") == "worker" and "engine" in s]
    if not engines:
        return {}
    summed = ("running", "tokens_in_flight", "kv_blocks_used", "kv_blocks", "preemptions",
              "admission_waits", "recomputed", "groups_in_flight", "turns",
              "environment_steps_running")  # fmt: skip
    total = {k: float(sum(s["engine"].get(k, 0) for s in engines)) for k in summed}
    for mean in ("slot_occupancy", "steps_per_launch"):
        total[mean] = sum(s["engine"].get(mean, 0.0) for s in engines) / len(engines)
    total["useful_tokens_per_s"] = float(
        sum((s.get("throughput") or {}).get("useful_tokens_per_s", 0.0) for s in engines)
    )
    return {f"rollout_engine/{k}": v for k, v in total.items()}
