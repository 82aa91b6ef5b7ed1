"""The controller's accounting, against the real in-process queues."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from rlax_core.config.sections import AlgorithmSection, RolloutSection, StalenessSection
from rlax_core.errors import RlaxError
from rlax_core.rl.roles.controller import Controller
from rlax_core.transport.inproc import InProcTransport
from rlax_core.types import PromptGroup, Rollout, RolloutGroup

_made: list[Controller] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    """Every controller a test made stops renewing its leases when the test ends."""
    yield
    while _made:
        _made.pop().close()


def _controller(
    transport: InProcTransport, *, k: int, per_step: int = 2, dynamic: bool = False,
    lease_s: float = 600.0,
) -> Controller:  # fmt: skip
    counter = itertools.count()

    def next_prompt():
        i = next(counter)
        return f"ex{i}", [1, 2, i % 50 + 3], {"kind": "math", "answer": str(i)}

    controller = Controller(
        next_prompt,
        prompts=transport.queue("prompts"),
        rollouts=transport.queue("rollouts"),
        rollout=RolloutSection(prompts_per_step=per_step, samples_per_prompt=2, lease_s=lease_s),
        staleness=StalenessSection(max_staleness=k, pull_every=1),
        algorithm=AlgorithmSection(dynamic_sampling=dynamic),
    )
    _made.append(controller)
    return controller


def _answer(transport: InProcTransport, version: int, rewards=(1.0, 0.0), only=None) -> list[str]:
    """Plays an inference worker: answers every queued prompt group with ``version``."""
    prompts, rollouts, done = transport.queue("prompts"), transport.queue("rollouts"), []
    while (lease := prompts.get(30.0, timeout=0)) is not None:
        group = PromptGroup.from_bytes(lease.payload)
        if only is not None and group.group_id not in only:
            prompts.nack(lease)
            break
        result = RolloutGroup(
            group_id=group.group_id, prompt_id=group.prompt_id, prompt_tokens=group.prompt_tokens,
            policy_version=version, worker_id="w",
            rollouts=tuple(
                Rollout(rollout_id=f"{group.group_id}/{j}", completion_tokens=(5,),
                        behaviour_logprobs=(-0.5,), finish_reason="stop", reward=r)
                for j, r in enumerate(rewards)
            ),
        )  # fmt: skip
        rollouts.put(group.group_id, result.to_bytes())
        prompts.ack(lease)
        done.append(group.group_id)
    return done


def test_synchronous_run_issues_one_step_and_trains_it_in_order() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=0)
    assert controller.issue(version=0) == 2
    assert controller.issue(version=0) == 0  # in flight is capped at prompts_per_step × (k + 1)
    assert _answer(transport, version=0) == ["g000000000-v0", "g000000001-v0"]
    batch = controller.next_batch(0, timeout_s=5)
    assert [g.group_id for g in batch] == ["g000000000-v0", "g000000001-v0"]
    assert controller.staleness_metrics(batch, 0)["staleness/max"] == 0.0
    assert controller.accounting.trained == 2


def test_token_staleness_counts_each_token_by_the_version_that_sampled_it() -> None:
    """A completion that spans a weight swap: its tokens are as old as their own
    versions, not all as old as the group's (its oldest token's)."""
    controller = _controller(InProcTransport(), k=2)
    spanning = Rollout(rollout_id="g/0", completion_tokens=(5, 6, 7, 8),
                       behaviour_logprobs=(-0.5,) * 4, token_versions=(3, 3, 4, 5),
                       finish_reason="stop", reward=1.0)  # fmt: skip
    whole = Rollout(rollout_id="g/1", completion_tokens=(5, 6), behaviour_logprobs=(-0.5,) * 2,
                    finish_reason="stop", reward=0.0)  # fmt: skip
    group = RolloutGroup(group_id="g", prompt_id="p", prompt_tokens=(1, 2), policy_version=3,
                         worker_id="w", rollouts=(spanning, whole))  # fmt: skip
    metrics = controller.staleness_metrics([group], 5)
    assert metrics["staleness/max"] == 2.0  # the group's oldest token
    ages = [2, 2, 1, 0, 2, 2]
    assert metrics["staleness/token_mean"] == pytest.approx(sum(ages) / len(ages))
    assert metrics["staleness/on_policy_token_fraction"] == pytest.approx(1 / 6)


def test_asynchronous_run_keeps_k_plus_one_steps_in_flight() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=2)
    assert controller.issue(version=5) == 6
    groups = [
        PromptGroup.from_bytes(transport.queue("prompts").get(30.0).payload) for _ in range(6)
    ]
    assert {g.min_policy_version for g in groups} == {5}


def test_stale_rollouts_are_dropped_counted_and_refilled() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=1)
    controller.issue(version=3)
    _answer(transport, version=1)  # a worker that sat on old weights: 2 versions old at 3
    with pytest.raises(RlaxError, match="no batch"):
        controller.next_batch(3, timeout_s=0.5)
    assert controller.accounting.dropped_stale == 4
    assert controller.in_flight == 4  # refilled
    _answer(transport, version=3)
    batch = controller.next_batch(3, timeout_s=5)
    assert all(g.policy_version == 3 for g in batch)


def test_waiting_groups_that_become_too_old_are_dropped() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=1, per_step=2)
    controller.issue(version=0)
    _answer(transport, version=0)
    controller.next_batch(0, timeout_s=5)  # trains 2 of the 4 groups; 2 are still queued
    with pytest.raises(RlaxError, match="no batch"):
        controller.next_batch(2, timeout_s=0.5)  # at version 2 they are 2 versions old
    assert controller.accounting.dropped_stale == 2


def test_a_group_is_trained_at_most_once() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=0, per_step=1)
    controller.issue(version=0)
    gid = _answer(transport, version=0)[0]
    batch = controller.next_batch(0, timeout_s=5)
    # The same rollouts arrive again (a worker whose lease expired finished anyway).
    again = RolloutGroup.model_validate({**batch[0].model_dump(), "worker_id": "other"})
    transport.queue("rollouts").put(gid + "-copy", again.to_bytes())
    controller.issue(version=1)
    _answer(transport, version=1)
    batch = controller.next_batch(1, timeout_s=5)
    assert batch[0].group_id != gid
    assert controller.accounting.duplicates == 1


def test_dynamic_sampling_drops_groups_without_signal() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=0, dynamic=True)
    controller.issue(version=0)
    _answer(transport, version=0, rewards=(1.0, 1.0))
    with pytest.raises(RlaxError, match="no batch"):
        controller.next_batch(0, timeout_s=0.5)
    assert controller.accounting.dropped_no_signal == 2
    _answer(transport, version=0, rewards=(0.0, 1.0))
    assert len(controller.next_batch(0, timeout_s=5)) == 2


def test_trained_rollouts_stay_leased_until_acknowledged() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=0)
    controller.issue(version=0)
    _answer(transport, version=0)
    controller.next_batch(0, timeout_s=5)
    assert transport.queue("rollouts").stats().leased == 2
    controller.acknowledge_trained()
    assert transport.queue("rollouts").stats().leased == 0


def test_state_round_trip_reissues_groups_in_flight() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=1)
    controller.issue(version=0)
    _answer(transport, version=0, only={"g000000000-v0"})  # one answered, three outstanding
    state = controller.state()
    assert state["next_index"] == 4
    fresh_transport = InProcTransport()  # the old process and its queues are gone
    resumed = _controller(fresh_transport, k=1)
    resumed.restore(state)
    assert resumed.in_flight == 4
    assert sorted(_answer(fresh_transport, version=0)) == [f"g00000000{i}-v0" for i in range(4)]
    assert resumed.issue(version=0) == 0


def test_restored_groups_that_never_come_back_are_issued_again_under_new_ids() -> None:
    # The queues outlive the trainer (a networked transport): a group the dead trainer
    # acked after its last checkpoint cannot be put again under its id (a duplicate put).
    transport = InProcTransport()
    controller = _controller(transport, k=0, per_step=2, lease_s=0.1)  # waits 2 × lease_s
    controller.issue(version=0)
    state = controller.state()  # the checkpoint: g0 and g1 in flight
    _answer(transport, version=0)
    rollouts = transport.queue("rollouts")
    while (lease := rollouts.get(30.0, timeout=0)) is not None:
        rollouts.ack(lease)  # the old trainer consumed them and died before a checkpoint
    resumed = _controller(transport, k=0, per_step=2, lease_s=0.1)
    resumed.restore(state)
    assert _answer(transport, version=0) == []  # the old ids are gone for good

    answered: list[str] = []

    def worker_answers() -> bool:
        answered.extend(_answer(transport, version=0))
        return False

    batch = resumed.next_batch(0, timeout_s=10, should_stop=worker_answers)
    assert sorted(g.group_id for g in batch) == ["g000000002-v0", "g000000003-v0"]
    assert [g.prompt_id for g in batch] == ["ex0", "ex1"]  # the same prompts
    assert resumed.accounting.replaced == 2


def test_a_restarted_trainer_never_reuses_the_ids_of_groups_its_predecessor_issued() -> None:
    # The dead trainer checkpointed with nothing in flight, then trained one more step
    # and issued the next, which a worker answered. Its successor resumes from the
    # checkpoint (same next_index) at a newer version, with k = 0.
    transport = InProcTransport()
    dead = _controller(transport, k=0, per_step=2, lease_s=0.1)
    state = dead.state()
    dead.issue(version=0)
    _answer(transport, version=0)
    dead.next_batch(0, timeout_s=5)  # trained after the checkpoint: held, never acked
    dead.issue(version=1)
    _answer(transport, version=1)
    dead.close()  # it is killed: no longer renewed, its leases run out
    time.sleep(0.3)
    resumed = _controller(transport, k=0, per_step=2, lease_s=0.1)
    resumed.restore(state)

    def worker_answers() -> bool:
        _answer(transport, version=2)
        return False

    # Reusing g0..g3 hangs: the puts are dropped as duplicates, while the dead trainer's
    # rollouts under those ids are stale (dropped) or arrive before they are issued.
    batch = resumed.next_batch(2, timeout_s=10, should_stop=worker_answers)
    assert [g.group_id for g in batch] == ["g000000000-v2", "g000000001-v2"]
    assert all(g.policy_version == 2 for g in batch)
    assert resumed.accounting.duplicates == 4  # the dead trainer's, all acked


def test_trained_rollouts_stay_leased_while_renewed() -> None:
    """Held rollouts stay leased through a training step three leases long (their
    leases renewed from the controller's thread), and go back once it stops renewing."""
    transport = InProcTransport()
    controller = _controller(transport, k=0, per_step=2, lease_s=0.6)
    for version in (0, 1):  # two steps: four groups held until a checkpoint
        controller.issue(version)
        _answer(transport, version)
        assert len(controller.next_batch(version, timeout_s=5)) == 2
    assert len(controller.held) == 4
    rollouts = transport.queue("rollouts")
    time.sleep(1.8)  # a long step: nothing of the controller's runs
    assert rollouts.get(0.6, timeout=0) is None  # nothing expired and came back
    assert rollouts.stats().leased == 4
    controller.acknowledge_trained(sorted(controller.held)[:2])
    assert len(controller.held) == 2 and rollouts.stats().leased == 2
    controller.close()  # the trainer is gone: the rest come back within a lease
    assert rollouts.get(0.6, timeout=2.0) is not None


def test_unjudged_completions_are_left_out_and_an_unjudged_group_is_replaced() -> None:
    transport = InProcTransport()
    controller = _controller(transport, k=0)
    controller.issue(version=0)
    first, second = "g000000000-v0", "g000000001-v0"
    _answer(transport, version=0, rewards=(None, None), only={first})  # SE / IE: no judgement
    _answer(transport, version=0, rewards=(1.0, None), only={second})  # one judged of two
    # The unjudged group is dropped and counted, and a new prompt takes its slot.
    with pytest.raises(RlaxError, match="1 of 2 rollout groups arrived"):
        controller.next_batch(0, timeout_s=1.0)
    assert controller.accounting.dropped_unjudged == 1
    assert controller.accounting.unjudged_rollouts == 3
    assert controller.accounting.issued == 3
    assert _answer(transport, version=0) == ["g000000002-v0"]
    batch = controller.next_batch(0, timeout_s=5)
    assert [g.group_id for g in batch] == [second, "g000000002-v0"]
    metrics = controller.accounting.as_metrics()
    assert (metrics["groups/dropped_unjudged"], metrics["rollouts/unjudged"]) == (1.0, 3.0)
