"""The records the scheduler keeps and hands out: requests, their samples (each a
sequence with its history and blocks), and the plan of one engine step. The policy that
moves them is :mod:`rlax_core.generate.paged.scheduler`."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    """A prompt and the samples to draw from it.

    Attributes:
        request_id: the caller's name for it (returned with its completions).
        prompt: token ids (at least one).
        seeds: one seed per sample.
        max_new_tokens: the most tokens each sample generates.
        stop_token_ids: tokens that end a sample (kept as its last token).
        budgets: per sample, its own most new tokens instead (empty: ``max_new_tokens``
            for each).
        multi_turn: samples pause at the end of a turn for the caller to extend or end
            them (their budget then counts every token after the prompt, the
            environment's too).
        turn_tokens: with ``multi_turn``, the most tokens a sample's first turn samples
            (0: its budget); each later turn's is given to :meth:`Scheduler.extend`.
    """

    request_id: Hashable
    prompt: tuple[int, ...]
    seeds: tuple[int, ...]
    max_new_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    budgets: tuple[int, ...] = ()
    multi_turn: bool = False
    turn_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.request_id!r}: the prompt has no tokens")
        if not self.seeds:
            raise ValueError(f"request {self.request_id!r}: no seeds (one per sample)")
        if self.budgets and len(self.budgets) != len(self.seeds):
            raise ValueError(
                f"request {self.request_id!r}: {len(self.budgets)} budgets for "
                f"{len(self.seeds)} samples"
            )
        if min(self.budgets or (self.max_new_tokens,)) < 1:
            raise ValueError(
                f"request {self.request_id!r}: every sample needs a budget of at least 1 "
                f"new token, got {min(self.budgets or (self.max_new_tokens,))}"
            )

    def budget(self, sample: int) -> int:
        """The most new tokens of sample ``sample``."""
        return self.budgets[sample] if self.budgets else self.max_new_tokens


@dataclass(eq=False)
class Sample:
    """One sequence: a request's sample, its history and where its keys live."""

    request: Request
    index: int
    age: int  # order of first admission: the youngest running sample is preempted first
    tokens: list[int] = field(default_factory=list)
    behaviour_logprobs: list[float] = field(default_factory=list)
    policy_logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # per token, the policy that sampled it
    sampled: list[bool] = field(default_factory=list)  # per token, False: an environment's
    turn_end: int | None = None  # len(tokens) at which this turn ends (None: the budget)
    top_logprobs: list[tuple] = field(default_factory=list)  # per token: (ids, logprobs)
    blocks: list[int] = field(default_factory=list)
    slot: int | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    group: PrefilledPrompt | None = None

    @property
    def seed(self) -> int:
        return self.request.seeds[self.index]

    @property
    def history(self) -> tuple[int, ...]:
        return (*self.request.prompt, *self.tokens)

    @property
    def limit(self) -> int:
        """The number of tokens at which this turn (or, single-turn, the sample) ends."""
        budget = self.request.budget(self.index)
        end = self.request.turn_tokens if self.turn_end is None else self.turn_end
        return min(end, budget) if end else budget

    @property
    def tokens_left(self) -> int:
        """Tokens the sample's budget still allows, its environment's included."""
        return self.request.budget(self.index) - len(self.tokens)

    @property
    def last_turn(self) -> list[int]:
        """The tokens sampled since the environment's last reply (all of them, single-turn)."""
        start = len(self.sampled)
        while start and self.sampled[start - 1]:
            start -= 1
        return self.tokens[start:]

    @property
    def position(self) -> int:
        """The position of the token fed next (its keys are not computed yet)."""
        return len(self.request.prompt) + len(self.tokens) - 1


@dataclass(eq=False)
class Prefill:
    """Positions ``[done, len(tokens))`` being computed into ``blocks``, a chunk a step
    (``done`` > 0 at the start: a paused sample's cached prefix, continued)."""

    tokens: tuple[int, ...]
    blocks: list[int]
    owner: PrefilledPrompt | Sample
    done: int = 0


@dataclass(eq=False)
class PrefilledPrompt:
    """A prefilled prompt whose samples have not all started."""

    request: Request
    blocks: list[int]
    started: int = 0
    finished: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class DecodeRow:
    """One slot's work in a step: feed ``token`` at ``position``, sample the next."""

    slot: int
    sample: Sample
    token: int
    position: int
    blocks: tuple[int, ...]


@dataclass(frozen=True)
class PrefillChunk:
    """Positions ``[start, start + len(tokens))`` of one history, written into ``blocks``
    (a segment of a step's prefill chunk: its queries see only these blocks)."""

    tokens: tuple[int, ...]
    start: int
    blocks: tuple[int, ...]


@dataclass(frozen=True)
class StepPlan:
    """One engine step: block copies first, then the decode rows and the prefill chunk
    (its segments, one per history, in order; none: no prefill).

    ``steps`` > 1 (never with a prefill chunk): a burst of up to that many decode steps,
    each row feeding the token it sampled in the one before, its blocks reserved for
    them; it ends early when every row has finished, or, with ``until_finish``, when
    one has (other work waits for its slot).
    """

    copies: tuple[tuple[int, int], ...]
    decode: tuple[DecodeRow, ...]
    prefill: tuple[PrefillChunk, ...]
    steps: int = 1
    until_finish: bool = False


@dataclass
class SchedulerStats:
    """Counters of a scheduler's life."""

    steps: int = 0  # decode steps (a burst's each counted)
    launches: int = 0  # calls to the device: single steps and bursts
    preemptions: int = 0
    admission_waits: int = 0  # steps in which ready work waited for blocks
    decoded_tokens: int = 0
    prefilled_tokens: int = 0
    busy_slot_steps: int = 0
    recomputed: int = 0  # sequences and prompts whose keys were dropped for new weights
    turns: int = 0  # turns of multi-turn samples that ended in a pause
    extended_tokens: int = 0  # environment tokens appended to paused samples
