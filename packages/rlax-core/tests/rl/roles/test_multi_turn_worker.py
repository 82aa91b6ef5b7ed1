"""Multi-turn rollouts on the streaming worker, against the real in-process store and
queues: token-exact turns, the limits, and environments that misbehave."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from rlax_core.config.sections import EngineSection, RolloutSection, StalenessSection, TurnsSection
from rlax_core.contracts import Environment, EnvStep, Episode, Judge, Message
from rlax_core.environments import ClientEnvironment, reply_text
from rlax_core.generate import Sampler
from rlax_core.models import QwenConfig, flat_params, init_model
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.batch import build_batch
from rlax_core.rl.roles.streaming_worker import StreamingWorker
from rlax_core.transport.inproc import InProcTransport
from rlax_core.types import PromptGroup, RolloutGroup
from rlax_core.types.verdict import Verdict, VerdictStatus

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"
# Long enough for a step that answers at once on a loaded machine; the hung one waits
# for RELEASE, set once the worker has given up on it.
TIMEOUT_S = 3.0
RELEASE = threading.Event()


class Scripted(Environment):
    """Answers by the problem's ``mode``: ``talk`` gives a tool result, then a user turn,
    then ends (the judge decides); ``rewarded`` ends at once with its own reward;
    ``endless`` never ends; ``hang`` hangs on its first step; ``raise`` raises."""

    def __init__(self) -> None:
        self.replies: dict[int, list[tuple[Message, ...]]] = {}
        self.closed = 0

    def start(self, problem: Mapping[str, Any]) -> Episode:
        return _Episode(self, problem["mode"])


class _Episode(Episode):
    def __init__(self, environment: Scripted, mode: str) -> None:
        self.env, self.mode, self.turns = environment, mode, 0

    def step(self, turn: str) -> EnvStep:
        self.turns += 1
        if self.mode == "hang":
            RELEASE.wait(60)
        if self.mode == "raise":
            raise RuntimeError("the environment broke")
        if self.mode == "rewarded":
            return EnvStep(done=True, reward=0.5)
        if self.mode == "talk" and self.turns == 3:
            return EnvStep(done=True)
        messages = (
            (Message(role="tool", content=f"result {self.turns}"),)
            if self.turns == 1 else (Message(role="user", content="Go on, please."),)
        )  # fmt: skip
        return EnvStep(messages=messages)

    def close(self) -> None:
        self.env.closed += 1


class LastTurnJudge(Judge):
    """Rewards 1 for an answer of an even number of characters; records what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def judge(self, problems, completions) -> list[Verdict]:
        self.seen += completions
        return [Verdict(status=VerdictStatus.AC, reward=float(len(c) % 2 == 0))
                for c in completions]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(TOKENIZER)


@pytest.fixture(scope="module")
def model(tokenizer: Tokenizer):
    return init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size), seed=1)


def _run(
    model, tokenizer, modes: list[str], *, budget: int = 400, environment=None, **turns
) -> tuple[dict, Any, LastTurnJudge]:
    """Runs a streaming worker on groups of two samples, one group per mode, until all
    are sent. (The quickstart's tokenizer is nearly byte-level: a reply is ~80 tokens.)"""
    RELEASE.clear()
    transport = InProcTransport()
    transport.parameter_store().publish(0, dict(flat_params(model)))
    prompts = transport.queue("prompts")
    prompt = tuple(tokenizer.apply_chat_template([{"role": "user", "content": "Add 2 and 3."}]))
    for i, mode in enumerate(modes):
        group = PromptGroup(group_id=f"g{i}", prompt_id=f"p{i}", prompt_tokens=prompt,
                            problem={"mode": mode}, samples_per_prompt=2)  # fmt: skip
        prompts.put(group.group_id, group.to_bytes())
    limits = {"max_turns": 3, "turn_tokens": 6, "step_timeout_s": TIMEOUT_S, **turns}
    rollout = RolloutSection(
        max_new_tokens=budget, groups_per_batch=8, logprob_check_groups=8, temperature=1.0,
        engine=EngineSection(kind="paged", slots=3, block_size=4, prefill_chunk=16,
                             max_prompt_tokens=128),
        turns=TurnsSection(**limits),
    )  # fmt: skip
    environment, judge = environment or Scripted(), LastTurnJudge()
    worker = StreamingWorker(
        "w", model=model, tokenizer=tokenizer, judge=judge, environment=environment,
        store=transport.parameter_store(), prompts=prompts, outbox=transport.queue("rollouts"),
        rollout=rollout, staleness=StalenessSection(), seed=3,
        stop_token_ids=(tokenizer.token_id("<|im_end|>"),),
    )  # fmt: skip
    sent: dict[str, RolloutGroup] = {}
    deadline = time.monotonic() + 120
    stop = threading.Event()
    while len(sent) < len(modes):
        assert time.monotonic() < deadline, f"only {sorted(sent)} were sent"
        worker.step(stop)
        while (lease := transport.queue("rollouts").get(30.0, timeout=0)) is not None:
            group = RolloutGroup.from_bytes(lease.payload)
            assert group.group_id not in sent
            sent[group.group_id] = group
    assert worker.status()["engine"]["turns"] > 0
    worker.close()
    environment.close()
    RELEASE.set()
    return sent, environment, judge


def _assert_talk_replies(rollout, tokenizer: Tokenizer) -> None:
    """The ``talk`` conversation's replies are its messages as the template renders
    them, tokenized once, never sampled."""
    im_end = tokenizer.token_id("<|im_end|>")
    tokens = rollout.completion_tokens
    for (start, end), messages in zip(
        rollout.environment_spans,
        [(Message(role="tool", content="result 1"),),
         (Message(role="user", content="Go on, please."),)],
        strict=True,
    ):  # fmt: skip
        closed = tokens[start - 1] == im_end
        assert list(tokens[start:end]) == tokenizer.encode(reply_text(messages, turn_closed=closed))
        assert set(rollout.behaviour_logprobs[start:end]) == {0.0}


def _assert_teacher_agrees(model, rollouts) -> None:
    """The trainer's teacher-forced log-probabilities equal the sampler's on every model
    token of each (group, rollout)."""
    prompts = [list(g.prompt_tokens) for g, _ in rollouts]
    scored = Sampler(model).score(prompts, [list(r.completion_tokens) for _, r in rollouts], 1.0)
    for (_, rollout), teacher in zip(rollouts, scored, strict=True):
        mask = np.asarray(rollout.sampled_mask())
        gap = np.abs(np.asarray(teacher) - np.asarray(rollout.policy_logprobs))[mask]
        assert gap.max() < 1e-5


def test_a_multi_turn_rollout_is_one_token_exact_sequence(model, tokenizer) -> None:
    """Three model turns with a tool result and a user turn between them: the
    environment's tokens are its replies as the chat template renders them, tokenized
    once; they are out of the loss; the trainer's teacher-forced log-probabilities of
    the whole sequence equal the sampler's on every model token; the judge sees the
    last turn."""
    sent, environment, judge = _run(model, tokenizer, ["talk", "talk"])
    rollouts = [(g, r) for g in sent.values() for r in g.rollouts]
    for group, rollout in rollouts:
        assert len(rollout.environment_spans) == 2 and rollout.end_reason is None
        _assert_talk_replies(rollout, tokenizer)
        assert group.logprob_gap is not None and group.logprob_gap < 1e-5
    _assert_teacher_agrees(model, rollouts)
    answers = sorted(tokenizer.decode(r.answer_tokens(), skip_special_tokens=True)
                     for _, r in rollouts)  # fmt: skip
    assert sorted(judge.seen) == answers
    batch, _ = build_batch(list(sent.values()), advantage="grpo")
    for row, (group, rollout) in enumerate(rollouts):
        p = len(group.prompt_tokens)
        counted = batch.loss_mask[row, p - 1 : p - 1 + len(rollout.completion_tokens)]
        assert counted.tolist() == rollout.sampled_mask()
    assert environment.closed == len(rollouts)


def test_limits_and_bad_environments_end_a_rollout_with_a_reason(model, tokenizer) -> None:
    """The turn limit, a hung step, a raising environment and an environment's own
    reward, side by side: each rollout ends with its reason, none takes another down."""
    modes = ["endless", "hang", "raise", "rewarded", "talk"]
    sent, environment, _ = _run(model, tokenizer, modes)
    by_mode = {mode: sent[f"g{i}"].rollouts for i, mode in enumerate(modes)}
    for rollout in by_mode["endless"]:
        assert "turn limit (3)" in rollout.end_reason and len(rollout.environment_spans) == 2
    for rollout in by_mode["endless"] + by_mode["talk"]:
        assert rollout.reward is not None  # judged
    for rollout in by_mode["hang"] + by_mode["raise"]:  # nothing known: never trained on
        assert rollout.reward is None and rollout.verdict.status == "SE"
    for rollout in by_mode["hang"]:
        assert f"ran past {TIMEOUT_S:g} s" in rollout.end_reason
        assert rollout.environment_spans == ()
    for rollout in by_mode["raise"]:
        assert "RuntimeError: the environment broke" in rollout.end_reason
    for rollout in by_mode["rewarded"]:
        assert rollout.reward == 0.5 and rollout.verdict.message == "rewarded by the environment"
    for rollout in by_mode["talk"]:
        assert rollout.end_reason is None and len(rollout.environment_spans) == 2
    assert environment.closed == 2 * len(modes)


def test_the_token_budget_ends_a_rollout(model, tokenizer) -> None:
    sent, _, _ = _run(model, tokenizer, ["endless"], budget=150, max_turns=50)
    for rollout in sent["g0"].rollouts:
        assert "token budget" in rollout.end_reason
        assert len(rollout.environment_spans) > 0 and len(rollout.completion_tokens) <= 150


class Conversation(ClientEnvironment):
    """The ``talk`` conversation of :class:`Scripted`, written against the OpenAI client;
    other modes misbehave: ``rewrite`` edits the history, ``elsewhere`` asks a prompt
    other than the one sampled from, ``raise`` fails after its first answer, ``stream``
    streams its second request."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[list[Any]] = []  # per finished episode: its responses
        self.refusals: list[str] = []

    async def run(self, client, model, problem):
        mode = problem["mode"]
        question = "Add 2 and 3." if mode != "elsewhere" else "Add 4 and 5."
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        answers = []
        try:
            for turn, reply in enumerate(
                [{"role": "tool", "tool_call_id": "c1", "content": "result 1"},
                 {"role": "user", "content": "Go on, please."}, None]
            ):  # fmt: skip
                if mode == "stream" and turn == 1:
                    chunks = [c async for c in await client.chat.completions.create(
                        model=model, messages=messages, stream=True)]  # fmt: skip
                    answers.append(chunks[0].choices[0].model_extra | chunks[0].model_extra)
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                    message = {"role": "assistant", "content": text}
                else:
                    response = await client.chat.completions.create(model=model, messages=messages)
                    answers.append(response.choices[0].model_extra | response.model_extra)
                    message = response.choices[0].message.model_dump(exclude_none=True)
                if mode == "raise":
                    raise ValueError("the program broke")
                if mode == "rewrite":
                    messages[0] = {"role": "user", "content": "Add 7 and 8."}
                messages.append(message)
                if reply is not None:
                    messages.append(reply)
        except openai.BadRequestError as exc:
            self.refusals.append(str(exc))
            raise
        self.answers.append(answers)
        return 0.25


def test_a_client_environment_trains_as_a_native_one(model, tokenizer) -> None:
    """The same three-turn conversation through the worker's OpenAI endpoint: the same
    token sequence, replies rendered once, behaviour log-probabilities equal to the
    teacher's; each response carries the tokens the rollout trains on; the program's
    return value is the reward."""
    sent, environment, judge = _run(
        model, tokenizer, ["talk", "stream"], environment=Conversation()
    )
    rollouts = [(g, r) for g in sent.values() for r in g.rollouts]
    assert len(environment.answers) == len(rollouts) == 4
    for _, rollout in rollouts:
        assert rollout.end_reason is None and len(rollout.environment_spans) == 2
        assert rollout.reward == 0.25 and rollout.verdict.message == "rewarded by the environment"
        _assert_talk_replies(rollout, tokenizer)
    # What the program was told is what the rollout holds: per turn, the context the
    # model read and the tokens it wrote, with their log-probabilities and versions.
    told = sorted(
        tuple(t for a in answers for t in a["token_ids"]) for answers in environment.answers
    )
    held = sorted(tuple(t for t, s in zip(r.completion_tokens, r.sampled_mask(), strict=True) if s)
                  for _, r in rollouts)  # fmt: skip
    assert told == held
    for answers in environment.answers:
        first = answers[0]["prompt_token_ids"]
        assert first == tokenizer.apply_chat_template([{"role": "user", "content": "Add 2 and 3."}])
        for a, b in itertools.pairwise(answers):
            assert b["prompt_token_ids"][: len(a["prompt_token_ids"])] == a["prompt_token_ids"]
            assert (
                b["prompt_token_ids"][len(a["prompt_token_ids"]) :][: len(a["token_ids"])]
                == a["token_ids"]
            )
        assert all(
            v == [0] * len(a["token_ids"]) for a in answers for v in [a["rlax"]["policy_versions"]]
        )
    _assert_teacher_agrees(model, rollouts)
    assert judge.seen == []  # the program rewarded every episode


def test_a_client_environment_that_breaks_the_rules_ends_unjudged(model, tokenizer) -> None:
    """A program that edits its history, asks another prompt than the one sampled from,
    or raises: each rollout ends SE with its reason, the program got a 400 naming the
    problem, and the well-behaved group beside them trains."""
    modes = ["rewrite", "elsewhere", "raise", "talk"]
    sent, environment, _ = _run(model, tokenizer, modes, environment=Conversation())
    by_mode = {mode: sent[f"g{i}"].rollouts for i, mode in enumerate(modes)}
    for mode, reason in [("rewrite", "changed message 0"), ("elsewhere", "not the prompt"),
                         ("raise", "ValueError: the program broke")]:  # fmt: skip
        for rollout in by_mode[mode]:
            assert rollout.verdict.status == "SE" and rollout.reward is None
            assert reason in rollout.end_reason, rollout.end_reason
    assert sum("differs from the conversation so far" in r for r in environment.refusals) == 2
    assert sum("differ from the" in r and "prompt the worker sampled" in r
               for r in environment.refusals) == 2  # fmt: skip
    for rollout in by_mode["talk"]:
        assert rollout.reward == 0.25 and len(rollout.environment_spans) == 2
