"""The verifier stage, against the real in-process store and queues."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from rlax_core.contracts.verifier import Judge
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.verifier import Verifier
from rlax_core.transport.inproc import InProcTransport
from rlax_core.types import Rollout, RolloutGroup
from rlax_core.types.verdict import Verdict, VerdictStatus

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"


class _CountingJudge(Judge):
    """AC when the completion's text is the problem's answer; counts what it judged."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.judged: list[str] = []
        self.delay_s = delay_s

    def judge(self, problems, completions):
        time.sleep(self.delay_s)
        self.judged += list(completions)
        return [
            Verdict(status=VerdictStatus.AC, reward=1.0)
            if c.strip() == p["answer"]
            else Verdict(status=VerdictStatus.WA, reward=0.0)
            for p, c in zip(problems, completions, strict=True)
        ]


def _group(tokenizer: Tokenizer, gid: str, version: int, answers: list[str]) -> RolloutGroup:
    rollouts = []
    for j, text in enumerate(answers):
        tokens = tuple(tokenizer.encode(text))
        rollouts.append(Rollout(rollout_id=f"{gid}/{j}", completion_tokens=tokens,
                                behaviour_logprobs=(-0.1,) * len(tokens), finish_reason="stop",
                                reward=None))  # fmt: skip
    return RolloutGroup(group_id=gid, prompt_id=gid, prompt_tokens=(1, 2), policy_version=version,
                        worker_id="w0", rollouts=tuple(rollouts),
                        problem={"kind": "math", "answer": "1374"})  # fmt: skip


def _verifier(transport: InProcTransport, judge: Judge, name: str = "v0", *, lease_s: float = 30):
    return Verifier(name, judge=judge, tokenizer=Tokenizer.from_dir(TOKENIZER),
                    store=transport.parameter_store(), to_verify=transport.queue("to_verify"),
                    rollouts=transport.queue("rollouts"), max_staleness=1, lease_s=lease_s,
                    groups_per_batch=4)  # fmt: skip


def _arrived(transport: InProcTransport) -> dict[str, RolloutGroup]:
    arrived = {}
    while (lease := transport.queue("rollouts").get(30.0, timeout=0)) is not None:
        group = RolloutGroup.from_bytes(lease.payload)
        arrived[group.group_id] = group
    return arrived


def test_a_verifier_judges_fresh_groups_and_passes_stale_ones_on_unjudged() -> None:
    transport, tokenizer, judge = InProcTransport(), Tokenizer.from_dir(TOKENIZER), _CountingJudge()
    transport.parameter_store().publish(5, {"w": np.zeros(2, np.float32)})
    for gid, version in (("fresh", 5), ("one-behind", 4), ("stale", 3)):
        group = _group(tokenizer, gid, version, ["1374", "4731"])
        transport.queue("to_verify").put(gid, group.to_bytes())
    verifier = _verifier(transport, judge)
    assert verifier.step()
    arrived = _arrived(transport)
    assert sorted(arrived) == ["fresh", "one-behind", "stale"]
    for gid in ("fresh", "one-behind"):
        assert [r.reward for r in arrived[gid].rollouts] == [1.0, 0.0]
        assert arrived[gid].verifier_id == "v0"
        assert arrived[gid].rollouts[0].verdict.status == VerdictStatus.AC
    # Too old to train on (5 - 3 > k = 1): no judging spent on it; the controller drops it.
    assert [r.reward for r in arrived["stale"].rollouts] == [None, None]
    assert arrived["stale"].verifier_id is None
    assert len(judge.judged) == 4
    assert (verifier.groups_done, verifier.dropped_stale, verifier.completions_done) == (2, 1, 4)
    assert transport.queue("to_verify").stats().ready == 0


def test_a_killed_verifiers_groups_are_judged_by_another_and_arrive_once() -> None:
    transport, tokenizer = InProcTransport(), Tokenizer.from_dir(TOKENIZER)
    transport.parameter_store().publish(0, {"w": np.zeros(2, np.float32)})
    group = _group(tokenizer, "g", 0, ["1374"])
    transport.queue("to_verify").put("g", group.to_bytes())
    # The first verifier leases the group and dies before it sends anything.
    assert transport.queue("to_verify").get(0.5, timeout=0) is not None
    time.sleep(0.6)  # its lease runs out
    second = _verifier(transport, _CountingJudge())
    assert second.step()
    # A verifier that judged the same group again (its lease had run out) puts a copy
    # under the same id: the queue keeps the first one.
    late = _verifier(transport, _CountingJudge(), "late")
    transport.queue("to_verify").put("g-again", group.to_bytes())
    assert late.step()
    arrived = _arrived(transport)
    assert list(arrived) == ["g"] and arrived["g"].verifier_id == "v0"


def test_verifier_threads_judge_while_the_queue_fills() -> None:
    transport, tokenizer = InProcTransport(), Tokenizer.from_dir(TOKENIZER)
    transport.parameter_store().publish(0, {"w": np.zeros(2, np.float32)})
    stop = threading.Event()
    verifiers = [_verifier(transport, _CountingJudge(delay_s=0.05), f"v{i}") for i in range(3)]
    threads = [threading.Thread(target=v.run, args=(stop,)) for v in verifiers]
    for thread in threads:
        thread.start()
    try:
        for i in range(30):
            group = _group(tokenizer, f"g{i}", 0, ["1374", "0"])
            transport.queue("to_verify").put(f"g{i}", group.to_bytes())
        deadline = time.monotonic() + 30
        arrived: dict[str, RolloutGroup] = {}
        while len(arrived) < 30 and time.monotonic() < deadline:
            arrived.update(_arrived(transport))
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert sorted(arrived) == sorted(f"g{i}" for i in range(30))
    assert all([r.reward for r in g.rollouts] == [1.0, 0.0] for g in arrived.values())
    assert sum(v.groups_done for v in verifiers) == 30
