"""Continuous batching's books: slots, chunked prefill, shared prompt blocks, preemption.

The plans run on a KV pool that holds token ids where a real engine writes keys and
values, and every "sampled" token is a function of the history read back through the
sample's block table: a block written to the wrong place, a copy missed or a block freed
too early changes the completion, which is compared with the same sample run alone.
"""

from __future__ import annotations

import random

import pytest

from rlax_core.generate.paged import SCRATCH_BLOCK, BlockPool, Request, Scheduler, StepPlan

VOCAB = 50
STOP = 7


def _next_token(history: tuple[int, ...], seed: int, index: int) -> int:
    mixed = hash((history, seed, index)) & 0xFFFFFFFF
    return mixed % VOCAB


def _alone(request: Request, sample: int) -> list[int]:
    """The sample's completion with nothing else in flight and no paging."""
    tokens: list[int] = []
    while len(tokens) < request.max_new_tokens:
        tokens.append(_next_token((*request.prompt, *tokens), request.seeds[sample], len(tokens)))
        if tokens[-1] in request.stop_token_ids:
            break
    return tokens


class _TokenPool:
    """Runs step plans on a pool of token ids, checking what each decode row reads."""

    def __init__(self, pool: BlockPool) -> None:
        self.size = pool.block_size
        self.blocks = [[None] * pool.block_size for _ in range(pool.num_blocks)]

    def _write(self, table: tuple[int, ...], position: int, token: int) -> None:
        block = table[position // self.size]
        assert block != SCRATCH_BLOCK, "a real position was given the scratch block"
        self.blocks[block][position % self.size] = token

    def _read(self, table: tuple[int, ...], length: int) -> tuple[int, ...]:
        return tuple(self.blocks[table[p // self.size]][p % self.size] for p in range(length))

    def run(self, plan: StepPlan) -> list[list[tuple[int, float, float]]]:
        """As the engine: per decode row, each step's (token, behaviour, policy); a burst
        runs each row until it stops or its budget ends, and ends as the engine's does."""
        for source, destination in plan.copies:
            self.blocks[destination] = list(self.blocks[source])
        for chunk in plan.prefill:
            for offset, token in enumerate(chunk.tokens):
                self._write(chunk.blocks, chunk.start + offset, token)
        sampled: list[list[tuple[int, float, float]]] = [[] for _ in plan.decode]
        feeding = {i: (row.token, row.position) for i, row in enumerate(plan.decode)}
        for _ in range(plan.steps):
            finished = False
            for i, (token, position) in list(feeding.items()):
                row = plan.decode[i]
                self._write(row.blocks, position, token)
                history = self._read(row.blocks, position + 1)
                assert history == (*row.sample.history, *(t for t, _, _ in sampled[i])), (
                    "the block table reads another history"
                )
                index = len(row.sample.tokens) + len(sampled[i])
                token = _next_token(history, row.sample.seed, index)
                sampled[i].append((token, -1.0, -2.0))
                request = row.sample.request
                if token in request.stop_token_ids or index + 1 == row.sample.limit:
                    del feeding[i]
                    finished = True
                else:
                    feeding[i] = (token, position + 1)
            if not feeding or (plan.until_finish and finished):
                break
        ran = max(map(len, sampled), default=0)
        # The engine returns as many steps for every row; those after a row's end are noise.
        return [draws + [(STOP + 1, 0.0, 0.0)] * (ran - len(draws)) for draws in sampled]


def _run(
    scheduler: Scheduler, requests: list[Request], burst: int = 1
) -> tuple[dict, list[StepPlan]]:
    for request in requests:
        scheduler.add(request)
    engine = _TokenPool(scheduler.pool)
    done: dict = {}
    plans = []
    while not scheduler.idle:
        plan = scheduler.plan(burst)
        plans.append(plan)
        for request, samples in scheduler.commit(plan, engine.run(plan)):
            done[request.request_id] = samples
        assert len(plans) < 100_000, "the scheduler does not finish"
    return done, plans


def _requests(count: int, *, seed: int = 0, samples: int = 3) -> list[Request]:
    rng = random.Random(seed)
    return [
        Request(
            request_id=f"r{i}",
            prompt=tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 20))),
            seeds=tuple(rng.randrange(1 << 30) for _ in range(samples)),
            max_new_tokens=rng.randint(1, 30),
            stop_token_ids=frozenset({STOP}),
        )
        for i in range(count)
    ]


def _scheduler(*, slots: int = 4, blocks: int = 200, chunk: int = 5) -> Scheduler:
    return Scheduler(slots=slots, pool=BlockPool(blocks, 4), prefill_chunk=chunk,
                     max_blocks_per_sequence=16)  # fmt: skip


def _completions(done: dict) -> dict:
    return {rid: [tuple(s.tokens) for s in samples] for rid, samples in done.items()}


@pytest.mark.parametrize("burst", [1, 5])
def test_every_sample_completes_as_it_would_alone(burst: int) -> None:
    requests = _requests(12)
    scheduler = _scheduler()
    done, plans = _run(scheduler, requests, burst)
    for request in requests:
        samples = done[request.request_id]
        assert [s.index for s in samples] == [0, 1, 2]
        for sample in samples:
            assert sample.tokens == _alone(request, sample.index)
            assert sample.finish_reason == ("stop" if sample.tokens[-1] == STOP else "length")
            assert len(sample.tokens) <= request.max_new_tokens
            assert sample.behaviour_logprobs == [-1.0] * len(sample.tokens)
            assert sample.policy_logprobs == [-2.0] * len(sample.tokens)
    assert scheduler.pool.used == 0, "blocks leaked"
    assert scheduler.stats.preemptions == 0
    bursts = [p for p in plans if p.steps > 1]
    assert bool(bursts) == (burst > 1) and not any(p.prefill for p in bursts)
    assert scheduler.stats.launches == len(plans) < scheduler.stats.steps + (burst == 1)


def test_completions_do_not_depend_on_order_or_slots() -> None:
    requests = _requests(10, seed=1)
    reference = _completions(_run(_scheduler(slots=1), requests)[0])
    shuffled = random.Random(2).sample(requests, len(requests))
    for slots in (3, 8):
        assert _completions(_run(_scheduler(slots=slots), shuffled)[0]) == reference


@pytest.mark.parametrize("burst", [1, 4])
def test_a_small_pool_preempts_and_recomputes(burst: int) -> None:
    requests = _requests(10, seed=3)
    reference = _completions(_run(_scheduler(), requests)[0])
    scheduler = _scheduler(slots=6, blocks=16)
    done, _ = _run(scheduler, requests, burst)
    assert _completions(done) == reference
    assert scheduler.stats.preemptions > 0
    assert scheduler.stats.admission_waits > 0
    assert sum(s.preemptions for samples in done.values() for s in samples) == (
        scheduler.stats.preemptions
    )
    assert scheduler.pool.peak_used <= scheduler.pool.capacity
    assert scheduler.pool.used == 0


@pytest.mark.parametrize(("slots", "chunk"), [(2, 3), (3, 2)])
def test_recompute_drops_every_key_and_loses_nothing(slots: int, chunk: int) -> None:
    """Keys dropped for new weights now and then, running, resumable, prefilling and
    prefilled-but-not-started alike: every sequence is prefilled again from its history
    (the fake pool checks each one reads its own history back), finishes as it would
    alone, and no block leaks. (The two shapes between them drop sequences in each of
    those states, and a prefill of a prompt whose samples are under way.)"""
    requests = _requests(10, seed=4)
    reference = _completions(_run(_scheduler(), requests)[0])
    scheduler = _scheduler(slots=slots, chunk=chunk)
    for request in requests:
        scheduler.add(request)
    engine, done, steps = _TokenPool(scheduler.pool), {}, 0
    while not scheduler.idle:
        plan = scheduler.plan()
        done.update((r.request_id, s) for r, s in scheduler.commit(plan, engine.run(plan)))
        steps += 1
        assert steps < 10_000, "the scheduler does not finish"
        if steps % 13 == 10 and steps < 200:  # (every 13 steps for good: no end)
            scheduler.recompute()
            assert scheduler.pool.used == 0  # nothing computed is kept
    assert _completions(done) == reference
    assert scheduler.stats.recomputed > 0
    assert scheduler.stats.preemptions == 0  # for want of blocks: none
    assert scheduler.pool.used == 0


def test_the_samples_of_a_prompt_share_its_full_blocks() -> None:
    # 15 prefilled positions in blocks of 4: three full blocks and one with 3 positions.
    prompt = tuple(range(1, 17))
    request = Request("shared", prompt, seeds=(1, 2, 3, 4), max_new_tokens=1)
    scheduler = _scheduler()
    done, plans = _run(scheduler, [request])
    # The prompt's 4 blocks, and one copy of its last block per sample (not 4 × 4).
    assert scheduler.pool.peak_used == 4 + 4
    assert sum(len(p.copies) for p in plans) == 4
    assert [s.tokens for s in done["shared"]] == [_alone(request, i) for i in range(4)]


def test_running_samples_decode_while_a_long_prompt_is_prefilled() -> None:
    short = Request("short", (1, 2), seeds=(5,), max_new_tokens=30)
    long = Request("long", tuple(range(60)), seeds=(6,), max_new_tokens=2)
    scheduler = Scheduler(slots=2, pool=BlockPool(64, 4), prefill_chunk=8,
                          max_blocks_per_sequence=32)  # fmt: skip
    done, plans = _run(scheduler, [short, long])

    def of_long(plan: StepPlan) -> bool:
        return any(c.tokens == long.prompt[c.start :][: len(c.tokens)] for c in plan.prefill)

    prefilling = [p for p in plans if of_long(p)]
    assert len(prefilling) == -(-59 // 8)  # the long prompt in chunks of 8 positions
    assert all(p.decode for p in prefilling[1:]), "a prefill step stalled the running sample"
    assert done["long"][0].tokens == _alone(long, 0)


def test_each_request_keeps_its_own_budget_and_stop_tokens() -> None:
    budgets = [Request(f"b{n}", (3, 4, 5), seeds=(n,), max_new_tokens=n) for n in (1, 5, 17)]
    stopping = Request("s", (3, 4, 5), seeds=(0,), max_new_tokens=200,
                       stop_token_ids=frozenset(range(VOCAB)))  # fmt: skip
    scheduler = Scheduler(slots=4, pool=BlockPool(200, 4), prefill_chunk=4,
                          max_blocks_per_sequence=64)  # fmt: skip
    done, _ = _run(scheduler, [*budgets, stopping])
    assert [len(done[f"b{n}"][0].tokens) for n in (1, 5, 17)] == [1, 5, 17]
    assert len(done["s"][0].tokens) == 1 and done["s"][0].finish_reason == "stop"


def test_each_sample_may_have_a_budget_of_its_own() -> None:
    request = Request("r", (1, 2, 3), seeds=(4, 5, 6), max_new_tokens=99, budgets=(3, 1, 8))
    done, _ = _run(_scheduler(), [request])
    assert [len(s.tokens) for s in done["r"]] == [3, 1, 8]
    assert [s.finish_reason for s in done["r"]] == ["length"] * 3
    with pytest.raises(ValueError, match="2 budgets for 3 samples"):
        Request("r", (1,), seeds=(4, 5, 6), max_new_tokens=9, budgets=(3, 1))
    with pytest.raises(ValueError, match="at least 1 new token, got 0"):
        Request("r", (1,), seeds=(4,), max_new_tokens=9, budgets=(0,))


def test_a_request_that_can_never_fit_is_refused() -> None:
    scheduler = Scheduler(slots=2, pool=BlockPool(6, 4), prefill_chunk=4,
                          max_blocks_per_sequence=8)  # fmt: skip
    with pytest.raises(ValueError, match="a sequence holds at most 8"):
        scheduler.add(Request("long", tuple(range(30)), seeds=(0,), max_new_tokens=4))
    with pytest.raises(ValueError, match="make the pool larger"):
        scheduler.add(Request("wide", tuple(range(10)), seeds=(0,), max_new_tokens=11))
    with pytest.raises(ValueError, match="no tokens"):
        Request("empty", (), seeds=(0,), max_new_tokens=1)


def test_short_prompts_share_one_prefill_chunk() -> None:
    """Prompts shorter than the chunk are prefilled several a step, so eight slots fill
    in two steps, not eight; each completes as it would alone."""
    requests = [Request(f"p{i}", (i + 1, i + 2, i + 3), seeds=(i,), max_new_tokens=4)
                for i in range(8)]  # fmt: skip
    scheduler = Scheduler(slots=8, pool=BlockPool(64, 4), prefill_chunk=8,
                          max_blocks_per_sequence=4)  # fmt: skip
    done, plans = _run(scheduler, requests)
    assert [len(p.prefill) for p in plans[:2]] == [4, 4]  # two positions each, 8 a chunk
    assert len(plans[2].decode) == 8
    assert all(done[r.request_id][0].tokens == _alone(r, 0) for r in requests)


def test_a_prompt_prefilled_into_the_last_blocks_gives_them_back() -> None:
    """Two prompts prefilled in one chunk fill the pool, and the first one's sample
    needs a block for its copy while nothing runs: the second prompt gives its blocks
    back and is prefilled again after, rather than the engine stalling."""
    requests = [Request(f"p{i}", tuple(range(i + 1, i + 7)), seeds=(i,), max_new_tokens=2)
                for i in range(2)]  # fmt: skip
    scheduler = Scheduler(slots=4, pool=BlockPool(5, 4), prefill_chunk=16,
                          max_blocks_per_sequence=4)  # fmt: skip
    done, plans = _run(scheduler, requests)
    assert [len(p.prefill) for p in plans[:2]] == [2, 1]  # the second prompt, again
    assert scheduler.stats.prefilled_tokens == 3 * 5
    assert all(done[r.request_id][0].tokens == _alone(r, 0) for r in requests)
    assert scheduler.pool.used == 0


# -- multi-turn: samples pause at a turn's end, the caller appends a reply and goes on --

TURNS, TURN_TOKENS = 3, 6


def _reply(history: tuple[int, ...]) -> tuple[int, ...]:
    """An environment's answer to a turn: one to three tokens that depend on it."""
    mixed = hash((history, -1)) & 0xFFFF  # ints only: the same in every process
    return tuple(VOCAB + (mixed >> (4 * i)) % 9 for i in range(1 + mixed % 3))


def _turns_alone(request: Request, sample: int) -> tuple[list[int], list[bool]]:
    """A multi-turn sample's tokens and which of them were sampled, run on its own."""
    tokens: list[int] = []
    sampled: list[bool] = []
    budget, turn_end = request.budget(sample), TURN_TOKENS
    for turn in range(TURNS):
        while True:
            token = _next_token((*request.prompt, *tokens), request.seeds[sample], len(tokens))
            tokens.append(token)
            sampled.append(True)
            if token in request.stop_token_ids or len(tokens) == min(turn_end, budget):
                break
        reply = _reply((*request.prompt, *tokens))
        if turn == TURNS - 1 or len(reply) >= budget - len(tokens):
            break
        tokens.extend(reply)
        sampled.extend([False] * len(reply))
        turn_end = len(tokens) + TURN_TOKENS
    return tokens, sampled


def _run_turns(
    scheduler: Scheduler, requests: list[Request], *, recompute_every: int = 0, delay: int = 0
):
    """Drives multi-turn requests to the end; an environment answers a turn ``delay``
    steps (or fewer: a hash of it) after it ended, as a sandbox would, while the others
    go on."""
    for request in requests:
        scheduler.add(request)
    engine, done, steps, turns, pending = _TokenPool(scheduler.pool), {}, 0, {}, []
    while not scheduler.idle:
        if scheduler.busy:
            plan = scheduler.plan(3)
            done.update((r.request_id, s) for r, s in scheduler.commit(plan, engine.run(plan)))
            steps += 1
            assert steps < 10_000, "the scheduler does not finish"
            if recompute_every and steps % recompute_every == 0 and steps < 300:
                scheduler.recompute()
        for sample in scheduler.take_turns():
            wait = hash(sample.history) % (delay + 1)
            pending.append((steps + wait, sample))
        pending.sort(key=lambda p: p[0])
        while pending and (pending[0][0] <= steps or not scheduler.busy):
            _, sample = pending.pop(0)
            turn = turns[id(sample)] = turns.get(id(sample), 0) + 1
            reply = _reply(sample.history)
            if turn == TURNS or len(reply) >= sample.tokens_left:
                done.update((r.request_id, s) for r, s in scheduler.end(sample))
            else:
                scheduler.extend(sample, reply, TURN_TOKENS)
    return done


def _multi_turn_requests(count: int, *, seed: int) -> list[Request]:
    return [
        Request(r.request_id, r.prompt, r.seeds, max_new_tokens=r.max_new_tokens + 12,
                stop_token_ids=r.stop_token_ids, multi_turn=True, turn_tokens=TURN_TOKENS)
        for r in _requests(count, seed=seed)
    ]  # fmt: skip


def test_a_multi_turn_sample_continues_from_its_cached_prefix() -> None:
    """Each turn's reply is appended and only it is prefilled (never the history
    again); every sample's tokens, environment tokens marked, are what it samples
    alone, and no block leaks."""
    requests = _multi_turn_requests(8, seed=5)
    scheduler = _scheduler(slots=3, blocks=300)
    done = _run_turns(scheduler, requests)
    appended = 0
    for request in requests:
        for sample in done[request.request_id]:
            tokens, sampled = _turns_alone(request, sample.index)
            assert (sample.tokens, sample.sampled) == (tokens, sampled)
            appended += sampled.count(False)
    assert appended > 0 and scheduler.stats.turns > len(requests)
    assert scheduler.stats.extended_tokens == appended
    prompts = sum(len(r.prompt) - 1 for r in requests)
    assert scheduler.stats.prefilled_tokens == prompts + appended
    assert scheduler.stats.preemptions == 0 and scheduler.pool.used == 0


@pytest.mark.parametrize(
    ("blocks", "recompute_every", "seed"),
    # seeds 10, 28 and 53 once stalled: nothing ran, paused samples held the blocks a
    # prefilled prompt's first sample needed, and no prefill was due to free them
    [(20, 0, 6), (20, 0, 10), (16, 0, 28), (24, 0, 53), (300, 7, 6)],
)
def test_paused_samples_give_up_their_keys_and_lose_nothing(
    blocks: int, recompute_every: int, seed: int
) -> None:
    """A small pool takes the keys of samples waiting for their environment first; new
    weights drop them too: either way they are prefilled again from their histories
    when extended, token-exact."""
    requests = _multi_turn_requests(8, seed=seed)
    scheduler = _scheduler(slots=4, blocks=blocks)
    done = _run_turns(scheduler, requests, recompute_every=recompute_every, delay=6)
    for request in requests:
        for sample in done[request.request_id]:
            assert (sample.tokens, sample.sampled) == _turns_alone(request, sample.index)
    assert scheduler.stats.preemptions + scheduler.stats.recomputed > 0
    assert scheduler.pool.used == 0


def test_only_a_paused_sample_is_extended_within_its_budget() -> None:
    request = Request("r", (1, 2, 3), seeds=(9,), max_new_tokens=4, multi_turn=True, turn_tokens=2)
    scheduler = _scheduler()
    scheduler.add(request)
    engine = _TokenPool(scheduler.pool)
    while not (turns := scheduler.take_turns()):
        plan = scheduler.plan()
        assert scheduler.commit(plan, engine.run(plan)) == []  # paused, not finished
    (sample,) = turns
    assert not scheduler.busy and not scheduler.idle  # waiting for the caller
    with pytest.raises(ValueError, match="tokens left"):
        scheduler.extend(sample, (1,) * sample.tokens_left, 1)
    with pytest.raises(ValueError, match="at least one token"):
        scheduler.extend(sample, (), 1)
    ((ended, samples),) = scheduler.end(sample)
    assert ended is request and samples == [sample] and scheduler.idle
    with pytest.raises(ValueError, match="only a paused sample"):
        scheduler.extend(sample, (1,), 1)
    assert scheduler.pool.used == 0


def test_a_sample_stopped_anywhere_ends_there_and_frees_its_blocks() -> None:
    """A caller's stop (a stop string) ends a sample wherever it is — running,
    preempted, prefilled again — keeping the tokens it had; the others are untouched."""
    requests = _requests(10, seed=8)
    reference = _completions(_run(_scheduler(), requests)[0])
    scheduler = _scheduler(slots=3, blocks=18)
    for request in requests:
        scheduler.add(request)
    engine, done, steps, stopped = _TokenPool(scheduler.pool), {}, 0, set()
    while not scheduler.idle:
        plan = scheduler.plan()
        done.update((r.request_id, s) for r, s in scheduler.commit(plan, engine.run(plan)))
        steps += 1
        assert steps < 10_000, "the scheduler does not finish"
        seen = [*(s for s in scheduler._running if s), *scheduler._preempted]
        for sample in seen:
            if len(sample.tokens) == 3 and sample.index == 1:
                stopped.add((sample.request.request_id, sample.index))
                done.update((r.request_id, s) for r, s in scheduler.stop(sample))
                assert scheduler.stop(sample) == []  # once only
    assert stopped and scheduler.stats.preemptions > 0
    for request_id, samples in done.items():
        for sample, tokens in zip(samples, reference[request_id], strict=True):
            if (request_id, sample.index) in stopped:
                assert sample.tokens == list(tokens[:3]) and sample.finish_reason == "stop"
            else:
                assert tuple(sample.tokens) == tokens
    assert scheduler.pool.used == 0


def test_a_cancelled_request_lets_go_of_everything_and_others_go_on() -> None:
    """Requests cancelled at different moments — queued, prefilling, running, some of
    their samples preempted or paused — are never reported and hold no block; every
    other request completes as it would alone."""
    requests = _requests(12, seed=9)
    reference = _completions(_run(_scheduler(), requests)[0])
    scheduler = _scheduler(slots=3, blocks=18)
    for request in requests:
        scheduler.add(request)
    engine, done, steps = _TokenPool(scheduler.pool), {}, 0
    cancel_at = {3: "r11", 5: "r0", 9: "r4", 20: "r7"}  # r11 is still queued at step 3
    while not scheduler.idle:
        plan = scheduler.plan()
        done.update((r.request_id, s) for r, s in scheduler.commit(plan, engine.run(plan)))
        steps += 1
        assert steps < 10_000, "the scheduler does not finish"
        if steps in cancel_at and cancel_at[steps] not in done:
            scheduler.cancel(cancel_at[steps])
    cancelled = {r for r in cancel_at.values() if r not in done}
    assert len(cancelled) >= 3  # the others had finished before their moment
    assert _completions(done) == {r: s for r, s in reference.items() if r not in cancelled}
    assert scheduler.pool.used == 0
