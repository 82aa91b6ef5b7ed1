"""The streaming worker, against the real in-process store and queues."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rlax_core.config.sections import EngineSection, RolloutSection, StalenessSection
from rlax_core.errors import TransportError
from rlax_core.generate import Sampler
from rlax_core.generate.paged import paged_attention
from rlax_core.models import QwenConfig, flat_params, init_model
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.batch import build_batch
from rlax_core.rl.roles.loop import POLL_S
from rlax_core.rl.roles.streaming_worker import StreamingWorker, engine_for, engine_metrics
from rlax_core.rl.roles.worker import InferenceWorker
from rlax_core.transport.inproc import InProcTransport
from rlax_core.types import PromptGroup, RolloutGroup

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(TOKENIZER)


@pytest.fixture(scope="module")
def model(tokenizer: Tokenizer):
    return init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size))


def _setup(model, groups: int, *, min_version: int = 0) -> InProcTransport:
    transport = InProcTransport()
    transport.parameter_store().publish(0, dict(flat_params(model)))
    prompts = transport.queue("prompts")
    for i in range(groups):
        group = PromptGroup(group_id=f"g{i}", prompt_id=f"p{i}",
                            prompt_tokens=tuple(range(5, 8 + i % 5)), samples_per_prompt=2,
                            min_policy_version=min_version)  # fmt: skip
        prompts.put(group.group_id, group.to_bytes())
    return transport


def _worker(
    kind, model, tokenizer, transport, stop=(7, 9, 11), **rollout
) -> InferenceWorker | StreamingWorker:
    settings = {"max_new_tokens": 12, "groups_per_batch": 8, "logprob_check_groups": 0}
    cfg = RolloutSection(**{**settings, **rollout})
    return kind("w", model=model, tokenizer=tokenizer, judge=None,
                store=transport.parameter_store(), prompts=transport.queue("prompts"),
                outbox=transport.queue("rollouts"), rollout=cfg, staleness=StalenessSection(),
                seed=3, stop_token_ids=stop)  # fmt: skip


def _sent(transport: InProcTransport) -> dict[str, RolloutGroup]:
    out = {}
    while (lease := transport.queue("rollouts").get(30.0, timeout=0)) is not None:
        group = RolloutGroup.from_bytes(lease.payload)
        assert group.group_id not in out
        out[group.group_id] = group
    return out


def _engine(**fields) -> EngineSection:
    return EngineSection(kind="paged", slots=3, block_size=4, prefill_chunk=8,
                         max_prompt_tokens=16, **fields)  # fmt: skip


def test_the_streaming_worker_sends_what_the_batch_worker_sends(model, tokenizer) -> None:
    """Same groups, same seeds: the same completions and log-probabilities, whatever the
    engine's slots; every group is sent once."""
    static = _setup(model, 6)
    worker = _worker(InferenceWorker, model, tokenizer, static)
    assert worker.step(threading.Event())
    expected = _sent(static)
    streaming = _setup(model, 6)
    worker = _worker(StreamingWorker, model, tokenizer, streaming, engine=_engine(),
                     logprob_check_groups=1, groups_per_batch=2)  # fmt: skip
    while len(expected) > worker.groups_done:
        assert worker.step(threading.Event())
    got = _sent(streaming)
    assert sorted(got) == sorted(expected)
    for gid, group in got.items():
        for a, b in zip(group.rollouts, expected[gid].rollouts, strict=True):
            assert a.completion_tokens == b.completion_tokens
            assert a.finish_reason == b.finish_reason
            assert a.behaviour_logprobs == pytest.approx(b.behaviour_logprobs, abs=1e-5)
    # One group of every two is re-scored by teacher forcing: fp32, the gap is tiny.
    gaps = [got[f"g{i}"].logprob_gap for i in range(6)]
    assert all(g is not None and g < 1e-5 for g in gaps[0::2])
    assert gaps[1::2] == [None] * 3
    assert streaming.queue("prompts").stats().ready == 0
    assert streaming.queue("prompts").stats().leased == 0  # every lease acked


def test_a_group_goes_out_when_its_samples_finish_not_with_a_batch(model, tokenizer) -> None:
    """A finished group is sent and its place taken by the next group while the others
    still decode; never more groups are held than the bound (2 × 3 slots / 2 samples)."""
    transport = _setup(model, 6)
    worker = _worker(StreamingWorker, model, tokenizer, transport, engine=_engine())
    mixed, sent = False, 0
    while worker.groups_done < 6:
        worker.step(threading.Event())
        sent += len(_sent(transport))
        assert sent == worker.groups_done  # on the queue the step it finished
        held = set(worker._groups)
        assert len(held) <= 3
        mixed |= bool(held & {"g0", "g1", "g2"}) and bool(held & {"g3", "g4", "g5"})
    assert mixed  # a later group started while an earlier one was still generating


def test_leases_of_groups_still_generating_are_renewed(model, tokenizer) -> None:
    transport = _setup(model, 1)
    worker = _worker(StreamingWorker, model, tokenizer, transport, stop=(),
                     engine=_engine(decode_burst=4), lease_s=1.0, max_new_tokens=40)  # fmt: skip
    worker.step(threading.Event())
    started = time.monotonic()
    while worker.groups_done == 0:
        time.sleep(0.15)  # a slow engine: the group takes longer than its lease
        worker.step(threading.Event())
    assert time.monotonic() - started > 1.0
    # Never handed out again: the lease was renewed in time, then acked.
    stats = transport.queue("prompts").stats()
    assert (stats.ready, stats.leased) == (0, 0)
    assert list(_sent(transport)) == ["g0"]


class _AwayForRenewals:
    """The prompt queue, its renewals failing as a server's would while ``away`` is set
    (every other call goes to the real queue)."""

    def __init__(self, queue) -> None:
        self._queue, self.away = queue, threading.Event()

    def extend(self, lease, lease_s):
        if self.away.is_set():
            raise TransportError("the queue's server is away")
        return self._queue.extend(lease, lease_s)

    def __getattr__(self, name):
        return getattr(self._queue, name)


def test_a_group_whose_lease_ran_out_mid_generation_is_generated_once(model, tokenizer) -> None:
    """The queue is away while both groups are generating: their leases run out, the
    groups come back to the queue and this worker leases them again. It goes on with
    what it was generating, submitting neither a second time."""
    transport = _setup(model, 2)
    prompts = _AwayForRenewals(transport.queue("prompts"))
    prompts.away.set()
    worker = StreamingWorker(
        "w", model=model, tokenizer=tokenizer, judge=None, store=transport.parameter_store(),
        prompts=prompts, outbox=transport.queue("rollouts"), seed=3, stop_token_ids=(),
        rollout=RolloutSection(max_new_tokens=12, lease_s=1.0, engine=_engine()),
        staleness=StalenessSection(),
    )  # fmt: skip
    worker.step(threading.Event())  # both leased and submitted
    time.sleep(1.2)  # both leases run out
    assert transport.queue("prompts").stats().ready == 2
    prompts.away.clear()
    while worker.groups_done < 2:
        worker.step(threading.Event())
    assert sorted(_sent(transport)) == ["g0", "g1"]
    assert worker._engine.scheduler.idle  # nothing submitted twice still queued
    stats = transport.queue("prompts").stats()
    assert (stats.ready, stats.leased) == (0, 0)


def test_groups_waiting_for_weights_longer_than_a_lease_stay_leased(model, tokenizer) -> None:
    """The groups need version 1, published three leases after they were leased (a large
    model's pull): their leases are renewed while the worker waits, so none goes back."""
    transport = _setup(model, 2, min_version=1)
    worker = _worker(StreamingWorker, model, tokenizer, transport, engine=_engine(),
                     lease_s=1.0)  # fmt: skip
    store = transport.parameter_store()
    publish = threading.Timer(3.0, store.publish, (1, dict(flat_params(model))))
    publish.daemon = True
    publish.start()
    prompts = transport.queue("prompts")
    while worker.groups_done < 2:
        worker.step(threading.Event())
        assert prompts.stats().ready == 0  # never back on the queue
    assert sorted(_sent(transport)) == ["g0", "g1"]


def test_a_stopped_worker_gives_its_groups_back_and_they_are_generated_again(
    model, tokenizer
) -> None:
    first = _setup(model, 4)
    worker = _worker(StreamingWorker, model, tokenizer, first, engine=_engine())
    while worker.groups_done == 0:
        worker.step(threading.Event())
    done_first = _sent(first)
    worker.close()  # its groups in flight go back at once
    assert first.queue("prompts").stats().ready == 4 - len(done_first)
    other = _worker(StreamingWorker, model, tokenizer, first, engine=_engine())
    while other.groups_done < 4 - len(done_first):
        other.step(threading.Event())
    again = _sent(first)
    assert sorted([*done_first, *again]) == [f"g{i}" for i in range(4)]
    # The same completions as one worker alone: nothing depends on who generated it.
    alone = _setup(model, 4)
    solo = _worker(StreamingWorker, model, tokenizer, alone, engine=_engine())
    while solo.groups_done < 4:
        solo.step(threading.Event())
    expected = _sent(alone)
    for gid, group in {**done_first, **again}.items():
        assert [r.completion_tokens for r in group.rollouts] == [
            r.completion_tokens for r in expected[gid].rollouts
        ]


def test_new_weights_wait_for_the_groups_in_flight(model, tokenizer) -> None:
    """A version published mid-generation is taken once the groups in flight finish: each
    group is sampled by one version, and the ones admitted after the pull by the new one."""
    transport = _setup(model, 6)
    worker = _worker(StreamingWorker, model, tokenizer, transport, engine=_engine())
    worker.step(threading.Event())
    assert worker.version == 0 and worker.status()["engine"]["groups_in_flight"] == 3
    first = {g for g in worker._groups}
    transport.parameter_store().publish(1, dict(flat_params(model)))
    while worker.groups_done < 6:
        worker.step(threading.Event())
    sent = _sent(transport)
    assert {gid for gid, g in sent.items() if g.policy_version == 0} >= first
    assert worker.version == 1
    assert any(g.policy_version == 1 for g in sent.values())


def test_the_status_shows_the_engine_and_the_trainer_sums_it(model, tokenizer) -> None:
    transport = _setup(model, 3)
    worker = _worker(StreamingWorker, model, tokenizer, transport, engine=_engine())
    worker.step(threading.Event())
    worker.step(threading.Event())
    status = worker.status()
    engine = status["engine"]
    assert engine["slots"] == 3 and 0 < engine["running"] <= 3
    assert engine["tokens_in_flight"] > 0 and engine["kv_blocks_used"] > 0
    assert 0 < engine["slot_occupancy"] <= 1 and engine["steps_per_launch"] >= 1
    metrics = engine_metrics([status, status, {"role": "worker"}, {"role": "trainer"}])
    assert metrics["rollout_engine/running"] == 2 * engine["running"]
    assert metrics["rollout_engine/slot_occupancy"] == pytest.approx(engine["slot_occupancy"])
    assert metrics["rollout_engine/steps_per_launch"] == pytest.approx(engine["steps_per_launch"])
    assert engine_metrics([{"role": "worker", "throughput": {}}]) == {}


def test_a_prompt_longer_than_the_engine_takes_is_a_config_error(model, tokenizer) -> None:
    transport = InProcTransport()
    transport.parameter_store().publish(0, dict(flat_params(model)))
    group = PromptGroup(group_id="long", prompt_id="p", prompt_tokens=tuple(range(5, 25)),
                        samples_per_prompt=2)  # fmt: skip
    transport.queue("prompts").put(group.group_id, group.to_bytes())
    worker = _worker(StreamingWorker, model, tokenizer, transport, engine=_engine())
    from rlax_core.errors import ConfigError

    with pytest.raises(ConfigError, match="max_prompt_tokens is 16: raise it"):
        worker.step(threading.Event())
    worker.close()
    assert transport.queue("prompts").stats().ready == 1  # given back, not lost


def test_in_flight_updates_swap_weights_mid_completion(model, tokenizer) -> None:
    """A version published mid-generation samples the rest of each completion: its tokens
    record two versions, the group's version is the oldest, and the batch the trainer
    builds pairs every token with its own behaviour log-probability."""
    transport = _setup(model, 1)
    # Bursts of two decode steps: six steps leave each completion under way.
    worker = _worker(StreamingWorker, model, tokenizer, transport, stop=(),
                     engine=_engine(decode_burst=2), in_flight_updates=True,
                     max_new_tokens=16)  # fmt: skip
    for _ in range(6):
        worker.step(threading.Event())
    assert worker.version == 0 and worker.groups_done == 0
    newer = {n: np.asarray(a) * 1.5 for n, a in flat_params(model).items()}
    transport.parameter_store().publish(1, newer)
    time.sleep(POLL_S)  # the worker looks at the store at most once a poll
    while worker.groups_done == 0:
        worker.step(threading.Event())
    assert worker.version == 1
    group = _sent(transport)["g0"]
    assert group.policy_version == 0  # the staleness bound applies to the oldest token
    scorer = Sampler(model)  # the old weights, teacher-forced
    prompt = list(group.prompt_tokens)
    for rollout in group.rollouts:
        versions = rollout.token_versions
        assert versions is not None and versions[0] == 0 and versions[-1] == 1
        assert list(versions) == sorted(versions)
        old = versions.index(1)
        forced = scorer.score([prompt], [list(rollout.completion_tokens)], 1.0)[0]
        assert np.allclose(rollout.behaviour_logprobs[:old], forced[:old], atol=1e-5)
        assert not np.allclose(rollout.behaviour_logprobs[old:], forced[old:], atol=1e-3)
    batch, metrics = build_batch([group], advantage="grpo", overlong_filter=False)
    assert metrics["completion/mixed_version_fraction"] == 1.0
    p = len(prompt)
    for row, rollout in enumerate(group.rollouts):
        n = len(rollout.completion_tokens)
        np.testing.assert_array_equal(
            batch.behaviour_logprobs[row, p - 1 : p - 1 + n],
            np.float32(rollout.behaviour_logprobs),
        )


def test_recompute_on_swap_prefills_the_sequences_in_flight_again(model, tokenizer) -> None:
    """With ``recompute_on_swap`` the worker drops the old weights' keys as it takes new
    ones: the later tokens are the new policy's over the whole history (teacher-forced
    with the new weights, within 1e-5)."""
    transport = _setup(model, 1)
    worker = _worker(StreamingWorker, model, tokenizer, transport, stop=(),
                     engine=_engine(recompute_on_swap=True, decode_burst=2),
                     in_flight_updates=True, max_new_tokens=16)  # fmt: skip
    for _ in range(6):
        worker.step(threading.Event())
    newer = {n: np.asarray(a) * 1.5 for n, a in flat_params(model).items()}
    transport.parameter_store().publish(1, newer)
    time.sleep(POLL_S)
    while worker.groups_done == 0:
        worker.step(threading.Event())
    assert worker.status()["engine"]["recomputed"] > 0
    group = _sent(transport)["g0"]
    scorer = Sampler(model)
    scorer.set_params(newer)
    for rollout in group.rollouts:
        assert rollout.token_versions is not None
        late = np.asarray(rollout.token_versions) == 1
        forced = scorer.score([list(group.prompt_tokens)], [list(rollout.completion_tokens)], 1.0)
        gap = np.abs(np.asarray(forced[0]) - np.asarray(rollout.policy_logprobs))[late]
        assert late.any() and gap.max() < 1e-5


def test_recompute_on_swap_needs_in_flight_updates() -> None:
    with pytest.raises(ValueError, match="recompute_on_swap acts on in-flight weight updates"):
        RolloutSection(engine=_engine(recompute_on_swap=True))
    with pytest.raises(ValueError, match="in_flight_updates needs the rollout engine"):
        RolloutSection(in_flight_updates=True)


def test_the_pallas_kernel_is_the_engines_attention_with_contiguous_bursts_off(model) -> None:
    with pytest.raises(ValueError, match="contiguous bursts would bypass"):
        _engine(attention="pallas")
    cfg = RolloutSection(engine=_engine(attention="pallas", contiguous_bursts=False))
    engine = engine_for(model, cfg, pad_token_id=0)
    assert engine._attention is not paged_attention  # the kernel's adapter
    assert engine_for(model, RolloutSection(engine=_engine()), pad_token_id=0)._attention is (
        paged_attention
    )
