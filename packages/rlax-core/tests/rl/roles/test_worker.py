"""The inference worker, against the real in-process store and queues."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rlax_core.config.sections import RolloutSection, StalenessSection
from rlax_core.contracts.verifier import Judge
from rlax_core.models import QwenConfig, flat_params, init_model
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.worker import InferenceWorker
from rlax_core.transport.inproc import InProcTransport
from rlax_core.types import PromptGroup, RolloutGroup
from rlax_core.types.verdict import Verdict, VerdictStatus

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"


class _LengthJudge(Judge):
    """Rewards completions of at least two characters."""

    def judge(self, problems, completions):
        return [
            Verdict(status=VerdictStatus.AC if len(c) > 1 else VerdictStatus.WA,
                    reward=float(len(c) > 1))
            for c in completions
        ]  # fmt: skip


def _worker(groups: list[PromptGroup], judge: Judge, *, publish_after_s: float = 0.0,
            **rollout) -> tuple:  # fmt: skip
    """A worker over the real in-process store (version 0 of a tiny model, published
    ``publish_after_s`` from now) and queues, ``groups`` queued; (worker, prompts,
    rollouts, tokenizer)."""
    tokenizer = Tokenizer.from_dir(TOKENIZER)
    model = init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size))
    transport = InProcTransport()
    weights = {n: a for n, a in flat_params(model).items()}
    publish = threading.Timer(publish_after_s, transport.parameter_store().publish, (0, weights))
    publish.daemon = True
    publish.start()
    prompts, rollouts = transport.queue("prompts"), transport.queue("rollouts")
    for group in groups:
        prompts.put(group.group_id, group.to_bytes())
    worker = InferenceWorker(
        "w", model=model, tokenizer=tokenizer, judge=judge,
        store=transport.parameter_store(), prompts=prompts, outbox=rollouts,
        rollout=RolloutSection(max_new_tokens=4, **rollout),
        staleness=StalenessSection(), seed=0, stop_token_ids=(),
    )  # fmt: skip
    return worker, prompts, rollouts, tokenizer


@pytest.mark.parametrize("checked", [0, 1, 3])
def test_the_worker_rescores_the_configured_groups_of_each_batch(checked: int) -> None:
    groups = [PromptGroup(group_id=f"g{i}", prompt_id=f"p{i}", prompt_tokens=(5, 6, 7 + i),
                          samples_per_prompt=2) for i in range(3)]  # fmt: skip
    worker, _, rollouts, _ = _worker(groups, _LengthJudge(), groups_per_batch=3,
                                     logprob_check_groups=checked)  # fmt: skip
    assert worker.step(threading.Event())
    results = {}
    while (lease := rollouts.get(30.0, timeout=0)) is not None:
        group = RolloutGroup.from_bytes(lease.payload)
        results[group.group_id] = group.logprob_gap
    assert sorted(results) == ["g0", "g1", "g2"]
    gaps = [results[f"g{i}"] for i in range(3)]
    assert all(g is not None and g < 1e-5 for g in gaps[:checked])  # fp32: sampler = forward
    assert gaps[checked:] == [None] * (3 - checked)


class _BrittleJudge(_LengthJudge):
    """The length judge, except that it raises on any batch holding a problem it chokes on
    (as a judge's bug on one odd input would)."""

    def judge(self, problems, completions):
        if any(p.get("answer") == "1e999999" for p in problems):
            raise OverflowError("integer division result too large for a float")
        return super().judge(problems, completions)


def test_a_judge_that_raises_on_one_problem_costs_that_problems_completions_only() -> None:
    groups = [PromptGroup(group_id=gid, prompt_id=gid, prompt_tokens=(5, 6, 7),
                          samples_per_prompt=2, problem={"kind": "math", "answer": answer})
              for gid, answer in (("bad", "1e999999"), ("good", "7"))]  # fmt: skip
    worker, _, rollouts, tokenizer = _worker(groups, _BrittleJudge(), groups_per_batch=2)
    assert worker.step(threading.Event())  # no exception: the worker lives on
    results = {}
    while (lease := rollouts.get(30.0, timeout=0)) is not None:
        group = RolloutGroup.from_bytes(lease.payload)
        results[group.group_id] = group.rollouts
    assert sorted(results) == ["bad", "good"]
    assert [(r.verdict.status, r.reward) for r in results["bad"]] == [(VerdictStatus.SE, None)] * 2
    assert "OverflowError" in results["bad"][0].verdict.message
    for rollout in results["good"]:
        text = tokenizer.decode(rollout.completion_tokens, skip_special_tokens=True)
        assert rollout.verdict == _LengthJudge().judge([{}], [text])[0]


LEASE_S = 1.0


class _SlowJudge(_LengthJudge):
    """The length judge, taking three of the worker's leases."""

    def judge(self, problems, completions):
        time.sleep(3 * LEASE_S)
        return super().judge(problems, completions)


def _two_groups() -> list[PromptGroup]:
    return [PromptGroup(group_id=f"g{i}", prompt_id=f"p{i}", prompt_tokens=(5, 6, 7 + i),
                        samples_per_prompt=2) for i in range(2)]  # fmt: skip


def test_a_batch_that_outlasts_its_leases_keeps_its_groups() -> None:
    """Sampling and judging a batch take three leases' time: the leases are renewed
    meanwhile, so no group goes back to the queue to be sampled again, and each is
    acked with its renewed lease."""
    worker, prompts, rollouts, _ = _worker(_two_groups(), _SlowJudge(), groups_per_batch=2,
                                           lease_s=LEASE_S)  # fmt: skip
    assert worker.step(threading.Event())
    stats = prompts.stats()
    assert (stats.ready, stats.leased) == (0, 0)  # nothing came back; both acked
    assert rollouts.stats().ready == 2


def test_groups_waiting_for_weights_longer_than_a_lease_stay_leased() -> None:
    """The weights arrive three leases after the groups were leased (a large model's
    pull): the leases are renewed while waiting, so the batch is still sampled here."""
    worker, prompts, rollouts, _ = _worker(
        _two_groups(), _LengthJudge(), groups_per_batch=2, lease_s=LEASE_S,
        publish_after_s=3 * LEASE_S,
    )  # fmt: skip
    assert worker.step(threading.Event())
    stats = prompts.stats()
    assert (stats.ready, stats.leased) == (0, 0)
    assert rollouts.stats().ready == 2
