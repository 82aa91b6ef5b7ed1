"""Continuous batching over a paged KV cache: what each engine step computes.

The engine has a fixed number of decode slots. Each step feeds every occupied slot its
sequence's newest token (one decode position each) and, beside them, one chunk of at
most ``prefill_chunk`` prompt positions, so a long prompt never stalls the running
sequences for its whole length. A chunk packs several prompts (up to
``MAX_PREFILL_SEGMENTS``) where they are short, one segment each, so that freed slots
and an empty engine fill in a few steps, not one step per prompt. A sequence that
finishes frees its slot for the next one at the next step.

A multi-turn request's samples pause at the end of each turn (a stop token or the
turn's budget) instead of finishing: the slot goes to the next sequence, the keys stay.
The caller appends the environment's reply (:meth:`Scheduler.extend`), and only those
tokens are prefilled before the sample decodes again from its cached prefix; or it ends
the sample (:meth:`Scheduler.end`). A paused sample's keys are the first to go when
blocks are short, and for new weights: it is prefilled again from its history when
extended.

Every sequence is in one shape: its history (prompt, then the tokens sampled so far),
keys and values computed for all but the last position, and that last token waiting to
be fed. A prompt is prefilled once, up to its last token, and its samples share its
full blocks (prefix sharing); each sample gets a private copy of a partly filled last
block (copy on write), then starts by feeding the prompt's last token, which samples its
first token. When a decode position needs a block and none is free, the youngest
running sequence is preempted: its blocks go back to the pool, and it is prefilled
again later from its history (recomputed), keeping the tokens it sampled. Admission
waits while blocks are short. Both are counted. New weights may drop every key and
value computed (:meth:`Scheduler.recompute`): each sequence is prefilled again from its
history in the same way, and each prefilled prompt from its prompt.

A step without a prefill chunk may be a burst of several decode steps run on the
device in one call (``burst``): each running sample gets blocks for its next positions
up front, and the burst ends early once every sample has finished, or once one has and
other work waits for its slot. A burst samples exactly what as many single steps would.

This module only keeps the books; :mod:`rlax_core.generate.paged.engine` turns a
:class:`StepPlan` into arrays and runs it. A completion depends only on its request and
its sample index (the engine draws its randomness from the sequence's seed and the
token's index), never on its slot or on the other sequences in flight.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

from rlax_core.generate.paged.blocks import BlockPool
from rlax_core.generate.paged.sequences import (
    DecodeRow,
    Prefill,
    PrefillChunk,
    PrefilledPrompt,
    Request,
    Sample,
    SchedulerStats,
    StepPlan,
)

MAX_PREFILL_SEGMENTS = 8  # the most prompts (or histories) one prefill chunk packs


class Scheduler:
    """Plans engine steps for requests, and takes back what each step sampled.

    Args:
        slots: decode slots (sequences decoding at once).
        pool: the KV blocks.
        prefill_chunk: the most prompt positions computed in one step.
        max_blocks_per_sequence: the block table's length (the engine's static shape).
    """

    def __init__(
        self, *, slots: int, pool: BlockPool, prefill_chunk: int, max_blocks_per_sequence: int
    ) -> None:
        if slots < 1 or prefill_chunk < 1 or max_blocks_per_sequence < 1:
            raise ValueError("slots, prefill_chunk and max_blocks_per_sequence must be ≥ 1")
        self.slots = slots
        self.pool = pool
        self.prefill_chunk = prefill_chunk
        self.max_blocks = max_blocks_per_sequence
        self.stats = SchedulerStats()
        self._waiting: deque[Request] = deque()  # not prefilled yet
        self._preempted: list[Sample] = []  # waiting to be prefilled again, oldest first
        self._resumable: deque[Sample] = deque()  # prefilled again, waiting for a slot
        self._ready: deque[PrefilledPrompt] = deque()  # prefilled, samples still to start
        self._stale: deque[PrefilledPrompt] = deque()  # like _ready, but to be prefilled again
        self._prefills: list[Prefill] = []  # in progress, in the order they started
        self._paused: list[Sample] = []  # multi-turn samples waiting for the caller
        self._continuing: deque[Prefill] = deque()  # extended, their new tokens to prefill
        self.turns_ended: list[Sample] = []  # paused since the caller last took them
        self.committed: list[Sample] = []  # the samples that sampled in the last commit
        self._running: list[Sample | None] = [None] * slots
        self._copies: list[tuple[int, int]] = []
        self._ages = 0

    # -- the caller's side --

    def add(self, request: Request) -> None:
        """Queues a request; its samples' completions come back from :meth:`commit`.

        Raises:
            ValueError: see :meth:`check`.
        """
        self.check(request)
        self._waiting.append(request)

    def check(self, request: Request) -> None:
        """Raises ValueError if a sample of ``request`` could never fit the block table
        or the pool (the message says which, and by how much)."""
        # Keys are computed for every position but the last sampled token's.
        budget = max(request.budget(i) for i in range(len(request.seeds)))
        longest = len(request.prompt) + budget - 1
        blocks = self.pool.blocks_for(longest)
        if blocks > self.max_blocks:
            raise ValueError(
                f"request {request.request_id!r}: {len(request.prompt)} prompt tokens and "
                f"{budget} new ones need {blocks} blocks of "
                f"{self.pool.block_size}; a sequence holds at most {self.max_blocks}"
            )
        if blocks + 1 > self.pool.capacity:
            raise ValueError(
                f"request {request.request_id!r} needs up to {blocks + 1} KV blocks; the pool "
                f"has {self.pool.capacity}: make the pool larger"
            )

    @property
    def idle(self) -> bool:
        """Nothing is queued, prefilling, running or paused."""
        return not (self._paused or self.busy)

    @property
    def busy(self) -> bool:
        """Some work can be planned (paused samples wait for the caller, not a step)."""
        return bool(
            self._waiting
            or self._continuing
            or self._preempted
            or self._resumable
            or self._ready
            or self._stale
            or self._prefills
            or any(self._running)
        )

    @property
    def running(self) -> int:
        return sum(s is not None for s in self._running)

    @property
    def tokens_in_flight(self) -> int:
        """History tokens of every running sequence."""
        return sum(s.position + 1 for s in self._running if s is not None)

    def plan(self, burst: int = 1) -> StepPlan:
        """The next step's work (call :meth:`commit` with what it sampled): a burst of
        up to ``burst`` decode steps when no prompt is being prefilled and the pool has
        the blocks for them, else one step."""
        self._plan_decode()  # blocks for the running samples before new ones take any
        waited = self._fill_slots()
        decode = self._plan_decode()
        prefill, blocked = self._plan_prefill()
        waited |= blocked
        copies, self._copies = tuple(self._copies), []
        if waited:
            self.stats.admission_waits += 1
        if not decode and not prefill and self.busy:
            raise RuntimeError(
                "the scheduler can make no progress: every queued sequence waits for KV "
                "blocks and nothing runs that could free them; make the pool larger"
            )
        self.stats.launches += 1
        if burst > 1 and not prefill and decode and self._reserve(burst):
            return StepPlan(copies=copies, decode=tuple(self._rows()), prefill=(),
                            steps=burst, until_finish=not self._all_running())  # fmt: skip
        return StepPlan(copies=copies, decode=tuple(decode), prefill=prefill)

    def commit(
        self,
        plan: StepPlan,
        sampled: Sequence[Sequence[tuple[int, float, float]]],
        version: int = 0,
    ) -> list[tuple[Request, list[Sample]]]:
        """Takes what a step sampled (per decode row, in the plan's order, the (token,
        behaviour and policy log-probability) of each decode step it ran; a row's draws
        after it finished are ignored) and the policy version that drew them; returns
        the requests whose samples have all finished."""
        if len(sampled) != len(plan.decode):
            raise ValueError(f"{len(plan.decode)} decode rows, {len(sampled)} samples")
        finished: list[tuple[Request, list[Sample]]] = []
        self.committed = [row.sample for row in plan.decode]
        self.stats.steps += max(1, max(map(len, sampled), default=1))
        for row, draws in zip(plan.decode, sampled, strict=True):
            sample = row.sample
            for token, behaviour, policy, *top in draws:
                if top:  # the engine records the most likely tokens too
                    sample.top_logprobs.append((top[0].tolist(), top[1].tolist()))
                sample.tokens.append(int(token))
                sample.behaviour_logprobs.append(float(behaviour))
                sample.policy_logprobs.append(float(policy))
                sample.versions.append(version)
                sample.sampled.append(True)
                self.stats.decoded_tokens += 1
                self.stats.busy_slot_steps += 1
                request = sample.request
                if int(token) in request.stop_token_ids:
                    sample.finish_reason = "stop"
                elif len(sample.tokens) == sample.limit:
                    sample.finish_reason = "length"
                else:
                    continue
                break
            if sample.finish_reason is None:
                continue
            self._running[row.slot] = None
            sample.slot = None
            if request.multi_turn:  # its keys stay, for the caller to extend or end it
                self._paused.append(sample)
                self.turns_ended.append(sample)
                self.stats.turns += 1
            else:
                finished.extend(self._close(sample))
        # A plan's segments are the first prefills in progress, in order (one that waited
        # for blocks may follow them, unplanned).
        for prefill, chunk in list(zip(self._prefills, plan.prefill, strict=False)):
            prefill.done += len(chunk.tokens)
            if prefill.done == len(prefill.tokens):
                self._finish_prefill(prefill)
        return finished

    def take_turns(self) -> list[Sample]:
        """The multi-turn samples whose turn ended since the last call, each to be
        extended or ended (``finish_reason`` says how the turn ended)."""
        turns, self.turns_ended = self.turns_ended, []
        return turns

    def extend(self, sample: Sample, tokens: Sequence[int], max_new_tokens: int) -> None:
        """Appends an environment's ``tokens`` to a paused sample, which then samples a
        turn of at most ``max_new_tokens`` (and what its budget has left). Only the new
        tokens are prefilled, over the keys the sample kept (all of them again if they
        were dropped meanwhile).

        Raises:
            ValueError: the sample is not paused, no token is given, or its budget
                leaves no room for them and one more sampled token.
        """
        if sample not in self._paused:
            raise ValueError("only a paused sample (a multi-turn sample whose turn ended) "
                             "can be extended")  # fmt: skip
        if not tokens:
            raise ValueError("extend needs at least one token to append")
        if max_new_tokens < 1 or len(tokens) >= sample.tokens_left:
            raise ValueError(
                f"the sample's budget has {sample.tokens_left} tokens left: not enough for "
                f"{len(tokens)} appended and {max(1, max_new_tokens)} sampled; end it instead"
            )
        self._paused.remove(sample)
        computed = sample.position  # keys exist for every position before it
        version = sample.versions[-1] if sample.versions else 0
        for token in tokens:
            sample.tokens.append(int(token))
            sample.behaviour_logprobs.append(0.0)
            sample.policy_logprobs.append(0.0)
            sample.versions.append(version)
            sample.sampled.append(False)
        sample.turn_end = len(sample.tokens) + max_new_tokens
        sample.finish_reason = None
        self.stats.extended_tokens += len(tokens)
        if sample.blocks:  # the cached prefix: compute the new positions only
            prefill = Prefill(sample.history[:-1], sample.blocks, sample, done=computed)
            sample.blocks = []  # the prefill holds them until it finishes
            self._continuing.append(prefill)
        else:  # its keys were dropped: prefilled again from its history
            self._preempted.append(sample)
            self._preempted.sort(key=lambda s: s.age)

    def end(self, sample: Sample) -> list[tuple[Request, list[Sample]]]:
        """Ends a paused sample (its ``finish_reason`` stays its last turn's); returns
        its request with every sample if it was the last to end, as :meth:`commit` does.

        Raises:
            ValueError: the sample is not paused.
        """
        if sample not in self._paused:
            raise ValueError("only a paused sample can be ended")
        self._paused.remove(sample)
        return self._close(sample)

    def stop(self, sample: Sample) -> list[tuple[Request, list[Sample]]]:
        """Ends a sample now, wherever it is (running, preempted, paused, being prefilled
        again), as if it had sampled a stop token: for a caller's own stop condition (a
        stop string). Returns its request if it was the last of its samples to end; []
        for a sample that had ended already.
        """
        if sample.finish_reason is not None and sample not in self._paused:
            return []  # it ended already (or ends at the next commit)
        if sample.slot is not None:
            self._running[sample.slot] = None
            sample.slot = None
        for prefill in [p for p in (*self._prefills, *self._continuing) if p.owner is sample]:
            (self._prefills if prefill in self._prefills else self._continuing).remove(prefill)
            self.pool.release(prefill.blocks)
        for waiting in (self._preempted, self._resumable, self._paused):
            if sample in waiting:
                waiting.remove(sample)
        sample.finish_reason = "stop"
        return self._close(sample)

    def cancel(self, request_id: Hashable) -> None:
        """Drops a request wherever its parts are — queued, prefilling, running, paused —
        its blocks back to the pool; its samples are never reported (a client that went
        away)."""

        def mine(request: Request) -> bool:
            return request.request_id == request_id

        self._waiting = deque(r for r in self._waiting if not mine(r))
        for groups in (self._ready, self._stale):
            for group in [g for g in groups if mine(g.request)]:
                groups.remove(group)
                self.pool.release(group.blocks)
                group.blocks = []
        for prefill in [p for p in (*self._prefills, *self._continuing) if mine(p.owner.request)]:
            (self._prefills if prefill in self._prefills else self._continuing).remove(prefill)
            self.pool.release(prefill.blocks)
        for slot, sample in enumerate(self._running):
            if sample is not None and mine(sample.request):
                self._running[slot] = sample.slot = None
                self.pool.release(sample.blocks)
                sample.blocks = []
        for waiting in (self._preempted, self._resumable, self._paused):
            for sample in [s for s in waiting if mine(s.request)]:
                waiting.remove(sample)
                self.pool.release(sample.blocks)
                sample.blocks = []
        self.turns_ended = [s for s in self.turns_ended if not mine(s.request)]

    def _close(self, sample: Sample) -> list[tuple[Request, list[Sample]]]:
        """Releases a finished sample's blocks; its request if all its samples ended."""
        self.pool.release(sample.blocks)
        sample.blocks = []
        group = sample.group
        assert group is not None
        group.finished.append(sample)
        if len(group.finished) < len(sample.request.seeds):
            return []
        return [(sample.request, sorted(group.finished, key=lambda s: s.index))]

    def _drop_continuing(self, *, counted: bool = True) -> bool:
        """Frees the cached prefix of the latest extended sample whose prefill has not
        started (prefilled from its whole history instead); False if there is none.
        ``counted``: a preemption for want of blocks (else for new weights)."""
        if not self._continuing:
            return False
        prefill = self._continuing.pop()
        self.pool.release(prefill.blocks)
        if counted:
            prefill.owner.preemptions += 1
            self.stats.preemptions += 1
        self._preempted.append(prefill.owner)
        self._preempted.sort(key=lambda s: s.age)
        return True

    def _drop_paused(self) -> bool:
        """Frees the keys of the youngest paused sample that holds any (prefilled again
        from its history when extended); False if none holds any."""
        holding = [s for s in self._paused if s.blocks]
        if not holding:
            return False
        sample = max(holding, key=lambda s: s.age)
        self.pool.release(sample.blocks)
        sample.blocks = []
        sample.preemptions += 1
        self.stats.preemptions += 1
        return True

    def recompute(self) -> int:
        """Drops every key and value computed so far, for new weights (call between a
        commit and the next plan): running and resumable samples are prefilled again
        from their histories, keeping their tokens, and prompts whose samples have not
        all started from their prompts. Returns how many it dropped."""
        dropped = 0
        while self._prefills:  # the latest first: each starts over, first in line
            self._abort_prefill(self._prefills[-1])
            dropped += 1
        for sample in [s for s in self._running if s is not None]:
            self._preempt(sample, counted=False)
            dropped += 1
        while self._resumable:
            sample = self._resumable.popleft()
            self._preempt(sample, counted=False)
            dropped += 1
        while self._ready:
            group = self._ready.popleft()
            self.pool.release(group.blocks)
            group.blocks = []
            self._stale.append(group)
            dropped += 1
        while self._drop_continuing(counted=False):
            dropped += 1
        for sample in self._paused:
            if sample.blocks:
                self.pool.release(sample.blocks)
                sample.blocks = []
                dropped += 1
        self._preempted.sort(key=lambda s: s.age)
        self.stats.recomputed += dropped
        return dropped

    # -- planning --

    def _plan_decode(self) -> list[DecodeRow]:
        """A row per running sample, each with a block for its position. While blocks
        are short, the prefills in progress are given up first, the latest started first
        (they are the least work lost), then the youngest running samples are preempted."""
        for sample in sorted((s for s in self._running if s is not None), key=lambda s: s.age):
            if sample.slot is None:  # preempted below, for an older sample
                continue
            while sample.position // self.pool.block_size >= len(sample.blocks):
                block = self.pool.allocate(1)
                if block is not None:
                    sample.blocks.extend(block)
                elif holding := [p for p in self._prefills if p.blocks]:
                    self._abort_prefill(holding[-1])
                elif self._drop_continuing() or self._drop_paused():
                    continue
                else:
                    running = (s for s in self._running if s is not None)
                    self._preempt(max(running, key=lambda s: s.age))
                    if sample.slot is None:
                        break
        return self._rows()

    def _rows(self) -> list[DecodeRow]:
        return [
            DecodeRow(slot, s, s.tokens[-1] if s.tokens else s.request.prompt[-1],
                      s.position, tuple(s.blocks))
            for slot, s in enumerate(self._running)
            if s is not None
        ]  # fmt: skip

    def _reserve(self, burst: int) -> bool:
        """Blocks for each running sample's next ``burst`` positions (fewer where its
        budget ends first); False, and nothing taken, if the pool has too few."""
        size = self.pool.block_size
        needed = []
        for sample in self._running:
            if sample is None:
                continue
            left = sample.limit - len(sample.tokens)
            furthest = sample.position + min(burst, left) - 1
            needed.append((sample, furthest // size + 1 - len(sample.blocks)))
        if sum(max(0, n) for _, n in needed) > self.pool.free:
            return False
        for sample, n in needed:
            if n > 0:
                blocks = self.pool.allocate(n)
                assert blocks is not None
                sample.blocks.extend(blocks)
        return True

    def _all_running(self) -> bool:
        """Nothing waits for a slot: no queued, preempted, resumable, ready or
        prefilling work."""
        return not (self._waiting or self._preempted or self._resumable or self._ready
                    or self._stale or self._prefills)  # fmt: skip

    def _preempt(self, sample: Sample, *, counted: bool = True) -> None:
        """Frees ``sample``'s slot (if it runs) and blocks; it is prefilled again later.
        ``counted``: a preemption for want of blocks (else for new weights)."""
        if sample.slot is not None:
            self._running[sample.slot] = None
        sample.slot = None
        self.pool.release(sample.blocks)
        sample.blocks = []
        if counted:
            sample.preemptions += 1
            self.stats.preemptions += 1
        self._preempted.append(sample)
        self._preempted.sort(key=lambda s: s.age)

    def _fill_slots(self) -> bool:
        """Starts waiting samples in free slots: resumed ones first, then new ones of
        prefilled prompts. True if one waited for a block."""
        for slot in range(self.slots):
            if self._running[slot] is not None:
                continue
            if self._resumable:
                self._start(self._resumable.popleft(), slot)
                continue
            if not self._ready:
                break
            group = self._ready[0]
            sample = Sample(group.request, group.started, age=self._ages, group=group)
            while not self._give_prompt_blocks(group, sample):
                if any(self._running) or not self._free_for_start():
                    return True  # running samples free blocks soon
            self._ages += 1
            group.started += 1
            if group.started == len(group.request.seeds):
                self._ready.popleft()
                self.pool.release(group.blocks)  # the samples hold what they need
            self._start(sample, slot)
        return False

    def _free_for_start(self) -> bool:
        """Frees blocks for the first prefilled prompt's next sample when nothing runs
        that would free any: an extended sample's cached prefix, a paused sample's keys,
        else the latest other prefilled prompt's (prefilled again later). False if there
        is nothing to free."""
        if self._drop_continuing() or self._drop_paused():
            return True
        if len(self._ready) < 2:
            return False
        group = self._ready.pop()
        self.pool.release(group.blocks)
        group.blocks = []
        if group.started:  # some of its samples under way: its prompt is prefilled again
            self._stale.appendleft(group)
        else:
            self._waiting.appendleft(group.request)
        return True

    def _give_prompt_blocks(self, group: PrefilledPrompt, sample: Sample) -> bool:
        """The prompt's blocks for a new sample: the full ones shared, a partly filled
        last one copied. False (nothing taken) if no block is free for the copy."""
        computed = len(group.request.prompt) - 1
        full = computed // self.pool.block_size
        shared = group.blocks[:full]
        if computed % self.pool.block_size:
            copy = self.pool.allocate(1)
            if copy is None:
                return False
            self._copies.append((group.blocks[full], copy[0]))
            self.pool.share(shared)
            sample.blocks = [*shared, *copy]
        else:
            self.pool.share(shared)
            sample.blocks = list(shared)
        return True

    def _start(self, sample: Sample, slot: int) -> None:
        sample.slot = slot
        self._running[slot] = sample

    def _plan_prefill(self) -> tuple[tuple[PrefillChunk, ...], bool]:
        """The next chunk: the prefills in progress continued, then new ones started
        while the chunk has room. Returns (its segments, whether a prefill waited for
        blocks)."""
        segments: list[PrefillChunk] = []
        room = self.prefill_chunk
        index = 0
        while room and len(segments) < MAX_PREFILL_SEGMENTS:
            if index == len(self._prefills) and not self._start_prefill(first=not segments):
                break
            prefill = self._prefills[index]
            count = min(room, len(prefill.tokens) - prefill.done)
            needed = self.pool.blocks_for(prefill.done + count) - len(prefill.blocks)
            if needed > 0:
                more = self.pool.allocate(needed)
                if more is None and not any(self._running):  # else blocks free up soon
                    while more is None and (self._drop_continuing() or self._drop_paused()):
                        more = self.pool.allocate(needed)
                if more is None:
                    if not prefill.blocks:  # started for this chunk: back in line
                        self._abort_prefill(prefill)
                    return tuple(segments), True
                prefill.blocks.extend(more)
            tokens = prefill.tokens[prefill.done : prefill.done + count]
            segments.append(PrefillChunk(tokens, prefill.done, tuple(prefill.blocks)))
            self.stats.prefilled_tokens += count
            room -= count
            index += 1
        return tuple(segments), False

    def _wants_prefill(self) -> bool:
        """Whether another prompt is worth prefilling now: its samples would find slots
        soon (fewer samples are waiting to start than there are slots)."""
        waiting = sum(len(g.request.seeds) - g.started for g in self._ready)
        waiting += sum(1 if isinstance(p.owner, Sample) else len(p.owner.request.seeds)
                       for p in self._prefills)  # fmt: skip
        return waiting + len(self._resumable) < self.slots

    def _start_prefill(self, *, first: bool) -> bool:
        """Starts the next prefill: an extended sample's new tokens first (only as a
        chunk's ``first`` segment: its table holds its whole history), then a preempted
        sample's history, then a prompt whose keys were dropped, else a new prompt (when
        its samples would find slots soon). False if there is none to start."""
        if self._continuing and first:
            self._prefills.append(self._continuing.popleft())
            return True
        if self._preempted:
            sample = self._preempted.pop(0)
            owner: PrefilledPrompt | Sample = sample
            tokens = sample.history[:-1]
        elif self._stale:
            owner = self._stale.popleft()
            tokens = owner.request.prompt[:-1]
        elif self._waiting and self._wants_prefill():
            request = self._waiting.popleft()
            owner = PrefilledPrompt(request, [])
            tokens = request.prompt[:-1]
        else:
            return False
        prefill = Prefill(tokens, [], owner)
        self._prefills.append(prefill)
        if not tokens:  # a one-token prompt: nothing to prefill
            self._finish_prefill(prefill)
            return self._start_prefill(first=first)
        return True

    def _abort_prefill(self, prefill: Prefill) -> None:
        """Gives up a prefill in progress, its blocks back to the pool; it starts over
        later, first in line."""
        self._prefills.remove(prefill)
        self.pool.release(prefill.blocks)
        owner = prefill.owner
        if isinstance(owner, Sample):
            self._preempted.insert(0, owner)
        elif owner.started:  # a prompt prefilled again, some of its samples under way
            self._stale.appendleft(owner)
        else:
            self._waiting.appendleft(owner.request)

    def _finish_prefill(self, prefill: Prefill) -> None:
        self._prefills.remove(prefill)
        owner = prefill.owner
        owner.blocks = prefill.blocks
        if isinstance(owner, Sample):
            self._resumable.append(owner)
        else:
            self._ready.append(owner)
