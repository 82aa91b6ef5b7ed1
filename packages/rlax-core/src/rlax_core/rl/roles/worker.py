"""The inference worker: lease prompt groups, sample with fresh-enough weights, judge, send.

With ``verifier.placement: stage`` the worker does not judge: it sends each group,
unjudged and with its problem, to the verifier stage (:mod:`~rlax_core.rl.roles.verifier`)
and goes straight back to sampling.

A worker is stateless: everything it holds can be lost at any moment. A prompt group is
leased, so a group held by a worker that dies goes back to the queue; rollouts are sent
under the group's id, so a group produced twice is delivered once; the sampling seed of
every completion is derived from (run seed, group id, sample index), so a group
regenerated with the same weights gives the same completions.
"""

from __future__ import annotations

import hashlib
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlax_core.config.sections import RolloutSection, StalenessSection
from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.contracts.queue import Queue
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import LeaseExpiredError
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.lease_keeper import renewing
from rlax_core.rl.roles.loop import LeasingLoop, lease_batch
from rlax_core.rl.roles.policy_follower import PolicyFollower
from rlax_core.rl.roles.rollout_groups import deliver, judge_completions, logprob_gaps, pack_group
from rlax_core.types.lease import Lease
from rlax_core.types.rollout import PromptGroup


def sample_seed(run_seed: int, group_id: str, sample: int) -> int:
    """The sampling seed of one completion: stable across processes and restarts."""
    digest = hashlib.blake2b(f"{run_seed}/{group_id}/{sample}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


class RolloutWorker(LeasingLoop):
    """What every inference worker holds and reports; a subclass generates.

    Args:
        worker_id: name in rollouts and status files.
        tokenizer: decodes completions for the judge.
        judge: decides rewards; None when the verifier stage judges.
        store: where weights are pulled from.
        prompts: where prompt groups are leased.
        outbox: where finished groups go: the rollout queue (judged here), or the
            to-verify queue (``judge`` None).
        rollout: sampling settings.
        staleness: ``pull_every``.
        seed: the run's seed.
        stop_token_ids: tokens that end a completion.
    """

    def __init__(
        self,
        worker_id: str,
        *,
        tokenizer: Tokenizer,
        judge: Judge | None,
        store: ParameterStore,
        prompts: Queue,
        outbox: Queue,
        rollout: RolloutSection,
        staleness: StalenessSection,
        seed: int,
        stop_token_ids: tuple[int, ...],
    ) -> None:
        self.worker_id = worker_id
        self._tokenizer = tokenizer
        self._judge = judge
        self._policy = PolicyFollower(store, staleness.pull_every, self._load)
        self._prompts = prompts
        self._outbox = outbox
        self._cfg = rollout
        self._seed = seed
        self._sampling = SamplingParams(
            max_new_tokens=rollout.max_new_tokens,
            temperature=rollout.temperature,
            top_k=rollout.top_k,
            top_p=rollout.top_p,
            stop_token_ids=stop_token_ids,
        )
        self.groups_done = 0
        self.samples_done = 0
        self.busy_s = 0.0

    @property
    def name(self) -> str:
        return self.worker_id

    @property
    def version(self) -> int | None:
        """The policy version sampled with (None before the first pull)."""
        return self._policy.version

    def status(self) -> dict[str, Any]:
        """The fields of this worker's status file (``rlax status``)."""
        rate = self.samples_done / self.busy_s if self.busy_s else 0.0
        return {"role": "worker", "policy_version": self.version, "groups": self.groups_done,
                "throughput": {"samples_per_s": rate}}  # fmt: skip

    @abstractmethod
    def _load(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """Samples with a fetched version's arrays (never written to) from now on."""


class InferenceWorker(RolloutWorker):
    """One worker's loop, a batch of groups at a time; run it in a thread (embedded run)
    or as its own process. ``model``: the policy's structure (and initial weights,
    replaced by the store's); the other arguments are :class:`RolloutWorker`'s."""

    def __init__(self, worker_id: str, *, model: Qwen, tokenizer: Tokenizer, **parts: Any) -> None:
        super().__init__(worker_id, tokenizer=tokenizer, **parts)
        self._sampler = Sampler(model, pad_token_id=tokenizer.pad_token_id or 0)

    def step(self, stop: threading.Event | None = None) -> bool:
        """Samples one batch of leased groups; False if none arrived within the poll."""
        leases = lease_batch(self._prompts, self._cfg.lease_s, self._cfg.groups_per_batch)
        if not leases:
            return False
        started = time.monotonic()
        groups = [PromptGroup.from_bytes(lease.payload) for lease in leases]
        # Pulling a large model's weights may outlast a lease: renewed meanwhile.
        with renewing(self._prompts, leases, self._cfg.lease_s) as leases:
            ready = self._policy.ensure(max(g.min_policy_version for g in groups), stop)
        if not ready:
            for lease in leases:
                self._prompts.nack(lease)
            return False
        version = self.version
        assert version is not None
        renewed = [(g, self._renew(lease)) for g, lease in zip(groups, leases, strict=True)]
        kept = [(g, lease) for g, lease in renewed if lease is not None]
        if not kept:
            return True
        groups, leases = [g for g, _ in kept], [lease for _, lease in kept]
        prompts, seeds, problems = [], [], []
        for group in groups:
            for j in range(group.samples_per_prompt):
                prompts.append(list(group.prompt_tokens))
                seeds.append(sample_seed(self._seed, group.group_id, j))
                problems.append(group.problem)
        sizes = {g.samples_per_prompt for g in groups}
        # A long generation may outlast a lease: renewed meanwhile, the groups stay ours
        # instead of going to another worker (or back to this one) to be sampled again.
        with renewing(self._prompts, leases, self._cfg.lease_s) as leases:
            if len(sizes) == 1:  # each prompt prefilled once, its samples sharing the cache
                unique = [list(g.prompt_tokens) for g in groups]
                out = self._sampler.generate(
                    unique, self._sampling, seed=seeds, samples_per_prompt=sizes.pop()
                )
            else:
                out = self._sampler.generate(prompts, self._sampling, seed=seeds)
            checked = sum(g.samples_per_prompt for g in groups[: self._cfg.logprob_check_groups])
            gaps = logprob_gaps(
                self._sampler, prompts[:checked], out.tokens[:checked],
                out.policy_logprobs[:checked], self._sampling.temperature,
            )  # fmt: skip
            gaps += [None] * (len(prompts) - checked)
            verdicts = judge_completions(self._judge, self._tokenizer, problems, out.tokens)
        generation_s = time.monotonic() - started
        row = 0
        for group, lease in zip(groups, leases, strict=True):
            rows = slice(row, row + group.samples_per_prompt)
            row += group.samples_per_prompt
            result = pack_group(
                group, worker_id=self.worker_id, version=version, tokens=out.tokens[rows],
                behaviour_logprobs=out.behaviour_logprobs[rows],
                policy_logprobs=out.policy_logprobs[rows],
                finish_reasons=out.finish_reasons[rows], verdicts=verdicts[rows],
                gaps=gaps[rows], generation_s=generation_s,
            )  # fmt: skip
            deliver(self._outbox, self._prompts, result, lease)
        self.groups_done += len(groups)
        self.samples_done += len(prompts)
        self.busy_s += time.monotonic() - started
        return True

    def _renew(self, lease: Lease) -> Lease | None:
        """The lease renewed for a full generation, or None if it already ended."""
        try:
            return self._prompts.extend(lease, self._cfg.lease_s)
        except LeaseExpiredError:
            return None  # not renewed in time (the queue was away): another worker has it

    def _load(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        self._sampler.set_params(arrays, in_place=True)  # a version never changes
