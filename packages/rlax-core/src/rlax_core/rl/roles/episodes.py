"""Multi-turn rollouts on the rollout engine: environment steps beside the decoding.

A multi-turn sample pauses in the engine at the end of each model turn, its keys kept
(:meth:`rlax_core.generate.paged.Engine.take_turns`). :class:`Episodes` hands the turn's
text to the sample's :class:`~rlax_core.contracts.Episode` on a thread pool, so a step
waiting on a sandbox never idles the engine, and when the answer comes renders its
messages in ChatML (:func:`rlax_core.environments.reply_text`), tokenizes them once and
appends them to the live sequence, which decodes on from its cached prefix. The history
is never re-tokenized: the rollout's tokens are exactly those sampled and appended.

A rollout ends when its episode is done, at ``rollout.turns.max_turns`` model turns,
when the token budget (``rollout.max_new_tokens``, the environment's tokens included)
leaves no room for a reply and a turn, when a step runs past
``rollout.turns.step_timeout_s``, or when the environment raises; the last three are
its ``end_reason``; the last two are the environment's failure, so the rollout gets an SE
verdict and no reward. One rollout's end never touches its neighbours.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from rlax_core.config.sections import TurnsSection
from rlax_core.contracts.environment import Environment, EnvStep, Episode, Turn
from rlax_core.environments.chat import IM_END, reply_text
from rlax_core.errors import ConfigError
from rlax_core.generate.next_token import SamplingParams
from rlax_core.generate.paged import Engine, Request, Sample
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.types.verdict import Verdict, VerdictStatus


@dataclass
class Ending:
    """How a multi-turn sample's episode ended: the environment's reward (None: the
    judge decides), why, when not by design, and whether the environment failed (it
    hung or raised: nothing is known, so the rollout gets no reward and is never
    trained on, as an SE verdict)."""

    reward: float | None = None
    reason: str | None = None
    failed: bool = False


@dataclass
class _Running:
    episode: Episode
    turns: int = 0
    step: Future[EnvStep] | None = None
    deadline: float = 0.0
    sample: Sample | None = None


@dataclass
class Episodes:
    """The episodes of one worker's multi-turn samples.

    Args:
        engine: the rollout engine the samples run on.
        environment: starts an episode per sample.
        tokenizer: decodes turns and encodes replies.
        limits: ``rollout.turns``.
    """

    engine: Engine
    environment: Environment
    tokenizer: Tokenizer
    limits: TurnsSection
    endings: dict[tuple[Any, int], Ending] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self._im_end = self.tokenizer.token_id(IM_END)
        except KeyError:
            raise ConfigError(
                f"the environment answers the model's turns in ChatML, but the tokenizer has "
                f"no {IM_END} token: use a Qwen-family tokenizer"
            ) from None
        self.environment.bind(self.tokenizer)
        self._pool = ThreadPoolExecutor(self.limits.environment_threads, "environment")
        self._running: dict[tuple[Any, int], _Running] = {}

    def request(self, request: Request, problem: Mapping[str, Any]) -> Request:
        """``request`` as a multi-turn one, an episode started for each of its samples."""
        for index in range(len(request.seeds)):
            self._running[(request.request_id, index)] = _Running(self.environment.start(problem))
        return Request(
            request.request_id, request.prompt, request.seeds, request.max_new_tokens,
            request.stop_token_ids, request.budgets, multi_turn=True,
            turn_tokens=self.limits.turn_tokens or 0,
        )  # fmt: skip

    @property
    def waiting(self) -> int:
        """Samples whose environment step is running."""
        return sum(r.step is not None for r in self._running.values())

    def wait(self, timeout: float) -> None:
        """Blocks until an environment step finishes or ``timeout`` seconds pass (for a
        worker whose engine has nothing to run meanwhile)."""
        steps = [r.step for r in self._running.values() if r.step is not None]
        if steps:
            wait(steps, timeout=timeout, return_when=FIRST_COMPLETED)

    def advance(self) -> list[tuple[Request, list[Sample]]]:
        """Hands each turn that ended to its episode, and takes each answer that came;
        returns the requests whose samples have all ended (as the engine's step does)."""
        for sample in self.engine.take_turns():
            running = self._running[_key(sample)]
            running.sample, running.turns = sample, running.turns + 1
            running.step = self._pool.submit(running.episode.take, self._turn(sample))
            running.deadline = time.monotonic() + self.limits.step_timeout_s
        finished: list[tuple[Request, list[Sample]]] = []
        now = time.monotonic()
        for key, running in list(self._running.items()):
            step = running.step
            if step is None or not (step.done() or now > running.deadline):
                continue
            running.step = None
            sample = running.sample
            assert sample is not None
            ending = self._answer(running, sample, step)
            if ending is not None:
                finished += self._end(key, running, sample, ending)
        return finished

    def _answer(self, running: _Running, sample: Sample, step: Future[EnvStep]) -> Ending | None:
        """Extends the sample with the environment's answer; its ending if there is none."""
        if not step.done():
            step.cancel()
            seconds = self.limits.step_timeout_s
            return Ending(reason=f"the environment step ran past {seconds:g} s", failed=True)
        try:
            answer = step.result()
        except Exception as exc:  # the environment's bug: this rollout ends, no other
            reason = f"the environment failed: {type(exc).__name__}: {exc}"[:500]
            return Ending(reason=reason, failed=True)
        if answer.done:
            return Ending(reward=answer.reward, reason=answer.reason)
        if running.turns >= self.limits.max_turns:
            return Ending(reason=f"the turn limit ({self.limits.max_turns}) was reached")
        closed = bool(sample.tokens) and sample.tokens[-1] == self._im_end
        reply = self.tokenizer.encode(reply_text(answer.messages, turn_closed=closed))
        if len(reply) >= sample.tokens_left:
            return Ending(reason="the token budget (rollout.max_new_tokens) was spent")
        left = sample.tokens_left - len(reply)
        self.engine.extend(sample, reply, min(self.limits.turn_tokens or left, left))
        return None

    def _end(
        self, key: tuple[Any, int], running: _Running, sample: Sample, ending: Ending
    ) -> list[tuple[Request, list[Sample]]]:
        del self._running[key]
        self.endings[key] = ending
        running.episode.close()
        return self.engine.end(sample)

    def _turn(self, sample: Sample) -> Turn:
        """The sample's latest model turn (after the last reply)."""
        tokens = sample.last_turn
        start = len(sample.tokens) - len(tokens)
        return Turn(
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            token_ids=tuple(tokens),
            context_ids=(*sample.request.prompt, *sample.tokens[:start]),
            logprobs=tuple(sample.behaviour_logprobs[start:]),
            versions=tuple(sample.versions[start:]),
            stopped=bool(tokens) and tokens[-1] in sample.request.stop_token_ids,
        )

    def run(self, requests: list[tuple[Request, Mapping[str, Any]]], params: SamplingParams):
        """Runs multi-turn requests (each with its problem) on an idle engine to the end;
        per request id, its samples with their endings, in sample order."""
        self.engine.submit([self.request(r, problem) for r, problem in requests], params)
        done: dict[Any, list[tuple[Sample, Ending]]] = {}
        while len(done) < len(requests):
            finished = self.engine.step()
            if not self.engine.scheduler.busy:
                self.wait(timeout=1.0)
            for request, samples in finished + self.advance():
                done[request.request_id] = [
                    (s, self.ending(request.request_id, s.index)) for s in samples
                ]
        return done

    def ending(self, request_id: Any, index: int) -> Ending:
        """How a sample ended (removed from the books)."""
        return self.endings.pop((request_id, index), Ending())

    def drop(self, request_id: Any) -> None:
        """Forgets a request's episodes (its group was given back)."""
        for key in [k for k in self._running if k[0] == request_id]:
            running = self._running.pop(key)
            if running.step is not None:
                running.step.cancel()
            running.episode.close()
        for key in [k for k in self.endings if k[0] == request_id]:
            del self.endings[key]

    def close(self) -> None:
        """Closes every episode still open and stops the pool (steps in flight are left
        to finish on their own: a thread cannot be killed; a sandbox kills its runs)."""
        for request_id in {k[0] for k in self._running}:
            self.drop(request_id)
        self._pool.shutdown(wait=False, cancel_futures=True)


def environment_verdict(ending: Ending) -> Verdict:
    """The verdict of an episode its environment decided: its reward, or SE (no reward)
    when the environment failed."""
    if ending.failed:
        return Verdict(status=VerdictStatus.SE, reward=None, message=ending.reason or "")
    assert ending.reward is not None
    status = VerdictStatus.AC if ending.reward > 0 else VerdictStatus.WA
    return Verdict(status=status, reward=ending.reward, message="rewarded by the environment")


def model_turns(sample: Sample) -> int:
    """How many turns the model took in a sample (its runs of sampled tokens)."""
    return 1 + sum(1 for a, b in itertools.pairwise(sample.sampled) if not a and b)


def _key(sample: Sample) -> tuple[Any, int]:
    return (sample.request.request_id, sample.index)
