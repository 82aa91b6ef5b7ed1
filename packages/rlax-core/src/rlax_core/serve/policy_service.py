"""The policy as a service: generation requests from any thread, one engine thread.

The rollout engine is driven by one thread, which takes queued generations, submits
them and steps the engine; after each step, every sample that sampled tokens reports
them to its generation's listener (on the engine thread: a listener hands them on, it
does not block). Stop strings are the service's: once a sample's text holds one, the
sample is stopped in the engine and its text cut there. Generations that sample with
another temperature, top-k or top-p than those in flight wait until the engine is idle
(the engine's decode step runs one setting at a time).

Every token comes with its behaviour and policy log-probabilities, the policy version
that sampled it and, when the engine records them, its most likely alternatives, so a
client (an RL environment written against an OpenAI client) never re-tokenizes and its
rollout trains as exactly as a native one.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlax_core.generate.next_token import SamplingParams
from rlax_core.generate.paged import Engine, Request, Sample
from rlax_core.generate.sampler import completion_seeds
from rlax_core.models.tokenizer import Tokenizer


@dataclass(frozen=True)
class Piece:
    """What one sample of a generation sampled since its last piece.

    Attributes:
        index: the sample (0 … n − 1).
        tokens: the new token ids.
        text: the new text (held back while it may still be cut by a stop string, or
            ends inside a UTF-8 sequence).
        behaviour_logprobs / policy_logprobs / versions: per new token.
        top_logprobs: per new token, (ids, log-probabilities) of the most likely tokens
            (empty when the engine records none).
        finish_reason: set on a sample's last piece: ``stop`` or ``length``.
    """

    index: int
    tokens: tuple[int, ...]
    text: str
    behaviour_logprobs: tuple[float, ...]
    policy_logprobs: tuple[float, ...]
    versions: tuple[int, ...]
    top_logprobs: tuple[tuple[list[int], list[float]], ...] = ()
    finish_reason: str | None = None


@dataclass(eq=False)
class Generation:
    """One request: ``n`` samples of a prompt.

    Attributes:
        prompt: token ids.
        params: temperature, top-k, top-p and ``max_new_tokens`` (each sample's budget).
        n: samples.
        seed: makes the samples reproducible (None: a fresh one).
        stop_token_ids: tokens that end a sample (kept as its last token).
        stop: strings that end a sample (its text is cut before them).
        listener: called with each :class:`Piece`, on the engine thread.
    """

    prompt: tuple[int, ...]
    params: SamplingParams
    listener: Callable[[Piece], None]
    n: int = 1
    seed: int | None = None
    stop_token_ids: frozenset[int] = frozenset()
    stop: tuple[str, ...] = ()
    _request_id: int = field(default=-1, repr=False)


@dataclass
class _Tracked:
    generation: Generation
    index: int
    sent_tokens: int = 0
    sent_text: str = ""
    finished: bool = False


class PolicyService:
    """Serves generations from one engine; :meth:`close` stops its thread.

    Args:
        engine: the rollout engine (its ``top_logprobs`` bounds what is reported).
        tokenizer: decodes texts for stop strings and streaming.
    """

    def __init__(self, engine: Engine, tokenizer: Tokenizer) -> None:
        self.engine = engine
        self._tokenizer = tokenizer
        self._pending: deque[Generation] = deque()
        self._tracked: dict[int, _Tracked] = {}  # id(sample) -> its books
        self._generations: dict[int, Generation] = {}
        self._ids = itertools.count()
        self._seeds = itertools.count(1 << 20)
        self._wake = threading.Condition()
        self._cancels: list[Generation] = []
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="policy-engine", daemon=True)
        self._thread.start()

    @property
    def version(self) -> int:
        """The policy version of the weights served."""
        return self.engine.version

    def check(self, prompt: Sequence[int], max_new_tokens: int) -> None:
        """Raises ValueError if a sample of this length could never be served."""
        self.engine.scheduler.check(Request("check", tuple(prompt), (0,), max_new_tokens))

    def longest(self, prompt: Sequence[int]) -> int:
        """The most new tokens a sample of ``prompt`` can have."""
        return self.engine.max_blocks * self.engine.block_size - len(prompt)

    def submit(self, generation: Generation) -> None:
        """Queues a generation; its pieces go to its listener.

        Raises:
            ValueError: it can never fit the engine (too long a prompt or budget).
            RuntimeError: the service is closed or its engine failed.
        """
        self.check(generation.prompt, generation.params.max_new_tokens)
        with self._wake:
            if self._closed or self._error is not None:
                raise RuntimeError(f"the policy service is closed ({self._error or 'stopped'})")
            generation._request_id = next(self._ids)
            if generation.seed is None:
                generation.seed = next(self._seeds)
            self._pending.append(generation)
            self._wake.notify()

    def cancel(self, generation: Generation) -> None:
        """Drops a generation (its client went away): it samples nothing more and its
        listener hears nothing more. Thread-safe; a finished one is left as it is."""
        with self._wake:
            self._cancels.append(generation)
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=30)

    # -- the engine thread --

    def _loop(self) -> None:
        try:
            while True:
                with self._wake:
                    while not (self._closed or self._pending or self._cancels
                               or self.engine.scheduler.busy):  # fmt: skip
                        self._wake.wait()
                    if self._closed:
                        return
                    self._drop_cancelled()
                    self._admit()
                if not self.engine.scheduler.busy:
                    continue
                finished = self.engine.step()
                self._report(finished)
        except BaseException as exc:  # the engine failed: every waiting listener hears it
            self._error = exc
            for generation in [*self._generations.values(), *self._pending]:
                for index in range(generation.n):
                    generation.listener(_failed(index))
            raise

    def _drop_cancelled(self) -> None:
        for generation in self._cancels:
            if generation in self._pending:
                self._pending.remove(generation)
            elif self._generations.pop(generation._request_id, None) is generation:
                self.engine.cancel(generation._request_id)
                for key in [k for k, t in self._tracked.items() if t.generation is generation]:
                    del self._tracked[key]
        self._cancels.clear()

    def _admit(self) -> None:
        """Submits queued generations that sample with the settings in flight (any, when
        the engine is idle), in order."""
        while self._pending:
            generation = self._pending[0]
            try:
                self.engine.submit([self._request(generation)], generation.params)
            except RuntimeError:  # other settings in flight: it waits for the engine
                return
            self._pending.popleft()
            self._generations[generation._request_id] = generation

    def _request(self, generation: Generation) -> Request:
        seeds = completion_seeds(generation.seed, generation.n)
        return Request(generation._request_id, generation.prompt,
                       tuple(int(s) for s in seeds), generation.params.max_new_tokens,
                       generation.stop_token_ids)  # fmt: skip

    def _report(self, finished: list[tuple[Request, list[Sample]]]) -> None:
        """Sends each sample's new piece: of those that sampled in the step, and of the
        requests it finished."""
        samples = [*self.engine.scheduler.committed, *(s for _, done in finished for s in done)]
        for sample in samples:
            generation = self._generations.get(sample.request.request_id)
            if generation is None:
                continue
            tracked = self._tracked.setdefault(id(sample), _Tracked(generation, sample.index))
            if not tracked.finished:
                finished += self._send(sample, tracked)
        for request, _ in finished:
            generation = self._generations.pop(request.request_id)
            for key in [k for k, t in self._tracked.items() if t.generation is generation]:
                del self._tracked[key]

    def _send(self, sample: Sample, tracked: _Tracked) -> list[tuple[Request, list[Sample]]]:
        """Sends the sample's new piece (cut at a stop string, which stops the sample);
        returns its request if stopping it ended the request."""
        text = self._tokenizer.decode(sample.tokens, skip_special_tokens=True)
        finish = sample.finish_reason
        ended: list[tuple[Request, list[Sample]]] = []
        cut = _first_stop(text, tracked.generation.stop, len(tracked.sent_text))
        if cut is not None:
            text, finish = text[:cut], "stop"
            ended = self.engine.stop(sample)
        if finish is None:  # hold back what a stop string or the next token may change
            hold = max((len(s) - 1 for s in tracked.generation.stop), default=0)
            text = text[: max(len(tracked.sent_text), len(text) - hold)]
            if text.endswith("\ufffd"):
                text = text[:-1]
        new = slice(tracked.sent_tokens, len(sample.tokens))
        piece = Piece(
            index=sample.index, tokens=tuple(sample.tokens[new]),
            text=text[len(tracked.sent_text) :],
            behaviour_logprobs=tuple(sample.behaviour_logprobs[new]),
            policy_logprobs=tuple(sample.policy_logprobs[new]),
            versions=tuple(sample.versions[new]),
            top_logprobs=tuple(sample.top_logprobs[new]), finish_reason=finish,
        )  # fmt: skip
        tracked.sent_tokens, tracked.sent_text = len(sample.tokens), text
        tracked.finished = finish is not None
        if piece.tokens or piece.text or tracked.finished:
            tracked.generation.listener(piece)
        return ended


def _first_stop(text: str, stops: Sequence[str], sent: int) -> int | None:
    """Where the first stop string in ``text`` starts (searched from where a new one
    could begin after the ``sent`` characters already sent), or None."""
    if not stops:
        return None
    start = max(0, sent - max(len(s) for s in stops))
    found = [i for s in stops if (i := text.find(s, start)) >= 0]
    return min(found) if found else None


def _failed(index: int) -> Piece:
    return Piece(index, (), "", (), (), (), finish_reason="error")
