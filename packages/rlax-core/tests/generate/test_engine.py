"""The rollout engine: the static sampler's contract, under continuous batching."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rlax_core.generate import Sampler, SamplingParams
from rlax_core.generate.paged import Request
from rlax_core.generate.paged.contiguous import MIN_COPY_STEPS
from rlax_core.generate.paged.engine import Engine
from rlax_core.models import QwenConfig, flat_params, init_model, replace_params

CONFIG = QwenConfig.tiny(vocab_size=96, num_kv_heads=1)
PROMPTS = [[5, 17, 21, 33], [9], [44 + i for i in range(19)], [3, 4, 5, 6, 7, 8, 9, 10]]
PARAMS = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95)


@pytest.fixture(scope="module")
def model():
    model = init_model(CONFIG, seed=0)
    # Sharper than the random init, so that the sampled tokens are not uniform noise.
    return replace_params(model, {n: np.asarray(a) * 2 for n, a in flat_params(model).items()})


@pytest.fixture(scope="module")
def engine(model) -> Engine:
    return Engine(model, slots=4, block_size=4, max_sequence_tokens=64, prefill_chunk=8)


def test_the_engine_samples_what_the_static_sampler_samples(model, engine: Engine) -> None:
    ours = engine.generate(PROMPTS, PARAMS, seed=5, samples_per_prompt=3)
    static = Sampler(model).generate(PROMPTS, PARAMS, seed=5, samples_per_prompt=3)
    assert ours.tokens == static.tokens
    assert ours.finish_reasons == static.finish_reasons
    # Each is within 1e-5 of the trainer (test below), so within 2e-5 of each other.
    for mine, theirs in ((ours.policy_logprobs, static.policy_logprobs),
                         (ours.behaviour_logprobs, static.behaviour_logprobs)):  # fmt: skip
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)


def test_policy_logprobs_equal_teacher_forcing(model, engine: Engine) -> None:
    """The logprob parity contract: the engine and the trainer agree within 1e-5 in fp32."""
    out = engine.generate(PROMPTS, PARAMS, seed=11, samples_per_prompt=2)
    prompts = [p for p in PROMPTS for _ in range(2)]
    trainer = Sampler(model).score(prompts, out.tokens, PARAMS.temperature)
    worst = max(
        float(np.abs(np.asarray(t) - np.asarray(p)).max())
        for t, p in zip(trainer, out.policy_logprobs, strict=True)
    )
    assert worst < 1e-5


def test_completions_do_not_depend_on_slots_order_or_preemption(model, engine: Engine) -> None:
    params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=(7,))
    seeds = list(range(100, 100 + 2 * len(PROMPTS)))
    reference = engine.generate(PROMPTS, params, seed=seeds, samples_per_prompt=2)
    order = random.Random(0).sample(range(len(PROMPTS)), len(PROMPTS))
    shuffled_seeds = [seeds[2 * i + j] for i in order for j in range(2)]
    # Room for about two sequences at a time: some are preempted and recomputed.
    small = Engine(model, slots=3, block_size=4, max_sequence_tokens=64, kv_tokens=64,
                   prefill_chunk=16)  # fmt: skip
    out = small.generate([PROMPTS[i] for i in order], params, seed=shuffled_seeds,
                         samples_per_prompt=2)  # fmt: skip
    assert small.scheduler.stats.preemptions > 0
    for k, i in enumerate(order):
        for j in range(2):
            assert out.tokens[2 * k + j] == reference.tokens[2 * i + j]
            np.testing.assert_allclose(out.policy_logprobs[2 * k + j],
                                       reference.policy_logprobs[2 * i + j], atol=1e-5)  # fmt: skip
    assert small.pool.used == 0


def test_compilations_are_bounded_by_the_chunk_buckets(model) -> None:
    engine = Engine(model, slots=2, block_size=4, max_sequence_tokens=96, prefill_chunk=16)
    rng = random.Random(1)
    for n in range(6):
        prompts = [[rng.randrange(CONFIG.vocab_size) for _ in range(rng.randint(1, 40))]
                   for _ in range(rng.randint(1, 5))]  # fmt: skip
        engine.generate(prompts, SamplingParams(max_new_tokens=rng.randint(1, 30)), seed=n)
    # No chunk, chunks of 8 and 16 positions, and a burst per width of contiguous copy
    # (a power of two of blocks up to the 24 a sequence may hold, or none).
    assert engine.width_buckets == (0, 1, 2, 4, 8, 16, 24)
    assert engine.compilations <= 3 + len(engine.width_buckets)


def test_after_warm_up_nothing_compiles(model) -> None:
    """``warm_up`` compiles every shape a run needs: requests with none or one stop
    token, long prompts and short, bursts and single steps, then compile nothing more."""
    engine = Engine(model, slots=2, block_size=4, max_sequence_tokens=64, prefill_chunk=16)
    engine.warm_up()
    compiled = engine.compilations
    for stops in ((), (7,)):
        params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=stops)
        engine.generate(PROMPTS, params, seed=2, samples_per_prompt=2)
    assert engine.scheduler.stats.launches < engine.scheduler.stats.steps  # bursts ran
    assert engine.compilations == compiled


def test_a_burst_samples_what_single_steps_sample(model) -> None:
    """Decode bursts (several steps a call, rows stopping inside one) change nothing a
    completion holds, and call the device fewer times than there are steps."""
    params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=(7, 11, 13))
    budgets = [20, 3, 9, 1, 17, 5, 12, 20]
    runs = {}
    for burst in (1, 8):
        engine = Engine(model, slots=3, block_size=4, max_sequence_tokens=64, prefill_chunk=8,
                        decode_burst=burst)  # fmt: skip
        out = engine.generate(PROMPTS, params, seed=3, samples_per_prompt=2, budgets=budgets)
        runs[burst] = out, engine.scheduler.stats
        assert engine.pool.used == 0
    (single, one), (burst, eight) = runs[1], runs[8]
    assert burst.tokens == single.tokens and burst.finish_reasons == single.finish_reasons
    assert {"stop", "length"} <= set(burst.finish_reasons)
    for mine, theirs in ((burst.policy_logprobs, single.policy_logprobs),
                         (burst.behaviour_logprobs, single.behaviour_logprobs)):  # fmt: skip
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert one.launches == one.steps and eight.launches < 0.6 * eight.steps
    assert eight.decoded_tokens == one.decoded_tokens == sum(map(len, single.tokens))


def test_a_contiguous_burst_samples_what_the_pool_samples(model) -> None:
    """Bursts that read a contiguous copy of their rows' blocks (near-equal contexts)
    sample what bursts reading the pool through the block tables sample."""
    params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=(7,))
    budgets = [20, 3, 9, 1, 17, 5, 12, 20]
    runs = {}
    for dense in (False, True):
        engine = Engine(model, slots=4, block_size=4, max_sequence_tokens=64, prefill_chunk=8,
                        kv_tokens=512, decode_burst=8, contiguous_bursts=dense)  # fmt: skip
        runs[dense] = engine.generate(PROMPTS, params, seed=6, samples_per_prompt=2,
                                      budgets=budgets), engine  # fmt: skip
    (paged, by_pool), (dense, by_copy) = runs[False], runs[True]
    assert set(by_pool.bursts_by_width) == {0}
    assert sum(n for width, n in by_copy.bursts_by_width.items() if width) > 0
    assert by_copy.peak_contiguous_bytes > 0 == by_pool.peak_contiguous_bytes
    assert dense.tokens == paged.tokens and dense.finish_reasons == paged.finish_reasons
    for a, b in zip(dense.policy_logprobs, paged.policy_logprobs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_a_burst_about_to_end_reads_the_pool(model) -> None:
    """A burst that stops at its first finish (others wait for a slot) and whose nearest
    finish is fewer than ``MIN_COPY_STEPS`` tokens away gathers no contiguous copy: the
    gather would cost more than those steps save. Bursts with longer to run still do."""
    engine = Engine(model, slots=4, block_size=4, max_sequence_tokens=64, prefill_chunk=16,
                    kv_tokens=512)  # fmt: skip
    chosen = []  # (steps the burst is expected to run, its copy's width)
    run_burst = engine._run_burst

    def spy(plan, rows, width):
        left = [row.sample.limit - len(row.sample.tokens) for row in plan.decode]
        chosen.append((min(left) if plan.until_finish else max(left), width))
        return run_burst(plan, rows, width)

    engine._run_burst = spy
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    budgets = [24, 2, 24, 3, 24, 2, 24, 4, 24, 24, 24, 24]  # short ones end soon, others wait
    engine.generate([[5, 17, 21, 33]] * 12, params, seed=2, budgets=budgets)
    short = [width for expected, width in chosen if expected < MIN_COPY_STEPS]
    assert short and set(short) == {0}
    assert any(width for expected, width in chosen if expected >= MIN_COPY_STEPS)


@pytest.mark.parametrize("kv_tokens", [96, 512])
def test_a_contiguous_copy_never_outgrows_the_pool(model, kv_tokens) -> None:
    """The pool's size bounds the KV memory: a burst whose copy would hold more blocks
    than the pool reads the pool instead (at 96 tokens, 24 blocks, the copies of 4 rows
    × 8 blocks would hold 32)."""
    params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=(7,))
    engine = Engine(model, slots=4, block_size=4, max_sequence_tokens=64, prefill_chunk=8,
                    kv_tokens=kv_tokens)  # fmt: skip
    engine.generate(PROMPTS, params, seed=6, samples_per_prompt=2,
                    budgets=[20, 3, 9, 1, 17, 5, 12, 20])  # fmt: skip
    block_bytes = engine.kv_bytes // engine.pool.num_blocks
    assert engine.peak_contiguous_bytes <= engine.pool.capacity * block_bytes
    # What a call held at once: the blocks in use and its copy, within twice the pool.
    apart = engine.pool.peak_used * block_bytes + engine.peak_contiguous_bytes
    assert engine.peak_contiguous_bytes < engine.peak_kv_bytes <= apart
    assert engine.peak_kv_bytes <= 2 * engine.pool.capacity * block_bytes


def test_the_tail_runs_only_the_rows_still_decoding(model) -> None:
    """With 16 slots and unequal budgets, the steps after most sequences have finished
    run a bucket of 8 packed rows, not all 16 slots, and sample what two slots
    sample; warm-up compiled that bucket too."""
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
    budgets = [2 + (i * 7) % 5 for i in range(15)] + [30]  # one long row, the rest short
    params = SamplingParams(max_new_tokens=30, temperature=1.0)
    engine = Engine(model, slots=16, block_size=4, max_sequence_tokens=64, prefill_chunk=32)
    assert engine.row_buckets == (8, 16)
    engine.warm_up()
    compiled = engine.compilations
    out = engine.generate(prompts, params, seed=4, samples_per_prompt=2, budgets=budgets)
    assert engine.compilations == compiled
    assert engine.launches_by_rows[8] > 0
    narrow = Engine(model, slots=2, block_size=4, max_sequence_tokens=64, prefill_chunk=32)
    reference = narrow.generate(prompts, params, seed=4, samples_per_prompt=2, budgets=budgets)
    assert set(narrow.launches_by_rows) == {2}
    assert out.tokens == reference.tokens
    for a, b in zip(out.policy_logprobs, reference.policy_logprobs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)


def test_new_weights_need_no_compilation(model, engine: Engine) -> None:
    before = engine.generate(PROMPTS, PARAMS, seed=1)
    compiled = engine.compilations
    doubled = {n: np.asarray(a) * 2 for n, a in flat_params(model).items()}
    engine.set_params(doubled)
    after = engine.generate(PROMPTS, PARAMS, seed=1)
    engine.set_model(model)
    assert after.tokens != before.tokens
    assert engine.compilations == compiled


def test_input_major_weights_sample_what_the_stored_layout_samples(model) -> None:
    """On a CPU the engine holds the decoder layers' linear weights transposed (its dots
    read them faster so); they sample what the checkpoint's layout samples, and weights
    set by name in that layout are transposed on the way in."""
    made = dict(slots=4, block_size=4, max_sequence_tokens=64, prefill_chunk=8)
    transposed, stored = Engine(model, **made), Engine(model, **made, input_major=False)
    up = (CONFIG.hidden_size, CONFIG.intermediate_size)  # gate_proj's and up_proj's (in, out)
    layers = CONFIG.num_layers
    assert [a.shape for a in transposed._weights.leaves].count(up) == 2 * layers
    assert [a.shape for a in stored._weights.leaves].count(up) == layers  # down_proj's
    doubled = {n: np.asarray(a) * 2 for n, a in flat_params(model).items()}
    for engine in (transposed, stored):
        engine.set_params(doubled)
    ours = transposed.generate(PROMPTS, PARAMS, seed=3, samples_per_prompt=2)
    theirs = stored.generate(PROMPTS, PARAMS, seed=3, samples_per_prompt=2)
    assert ours.tokens == theirs.tokens
    for a, b in zip(ours.policy_logprobs, theirs.policy_logprobs, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)
    name = "model.layers.0.mlp.up_proj.weight"
    with pytest.raises(ValueError, match="the model needs"):  # given transposed: refused
        transposed.set_params({**doubled, name: doubled[name].T})


def test_bad_requests_are_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[1], []], PARAMS, seed=0)
    with pytest.raises(ValueError, match="a sequence holds at most"):
        engine.generate([[1] * 60], PARAMS, seed=0)
    assert engine.scheduler.idle


def _swap_mid_flight(model, newer, params: SamplingParams, *, recompute: bool = False):
    """Two requests of two samples on two slots, ``newer`` weights (version 1) taken
    between two steps once six tokens are sampled (and the keys recomputed, if asked);
    the engine and every request's samples."""
    engine = Engine(
        model, slots=2, block_size=4, max_sequence_tokens=64, prefill_chunk=8, decode_burst=4
    )  # a burst shorter than a budget: the swap lands mid-way
    requests = [Request(i, tuple(p), seeds=(i, i + 10), max_new_tokens=10)
                for i, p in enumerate(PROMPTS[:2])]  # fmt: skip
    engine.submit(requests, params)
    done = {}
    while engine.scheduler.stats.decoded_tokens < 6:
        done.update((r.request_id, s) for r, s in engine.step())
    engine.set_params(newer, version=1)
    if recompute:
        assert engine.recompute() > 0
    while len(done) < 2:
        done.update((r.request_id, s) for r, s in engine.step())
    return engine, done


def test_new_weights_mid_flight_keep_the_sequences_and_mark_their_tokens(model) -> None:
    """Weights swapped between two steps: nothing in flight is dropped, and every token
    records the version that sampled it."""
    params = SamplingParams(max_new_tokens=10, temperature=1.0)
    newer = {n: np.asarray(a) * 2 for n, a in flat_params(model).items()}
    engine, done = _swap_mid_flight(model, newer, params)
    engine.set_model(model, version=0)
    spanning = [s for samples in done.values() for s in samples if len(set(s.versions)) == 2]
    assert spanning, "no sequence was in flight at the swap"
    for sample in spanning:
        assert sample.versions == sorted(sample.versions) and len(sample.tokens) == 10
    alone = engine.generate([PROMPTS[0]], params, seed=[0, 10], samples_per_prompt=2)
    assert [s.tokens for s in done[0]] != alone.tokens  # the new weights took effect


def test_recompute_on_swap_gives_the_new_weights_keys(model) -> None:
    """After a swap and a recompute, the tokens sampled later have the new policy's
    teacher-forced log-probabilities over the whole history (up to fp32 noise); without the
    recompute, they attend to keys the old weights computed, and do not."""
    newer = {n: np.asarray(a) * 1.5 for n, a in flat_params(model).items()}
    new_model = replace_params(model, newer)
    params = SamplingParams(max_new_tokens=10, temperature=1.0)
    gaps = {}
    for recompute in (False, True):
        _, done = _swap_mid_flight(model, newer, params, recompute=recompute)
        samples = [s for samples in done.values() for s in samples if len(set(s.versions)) == 2]
        assert samples, "no sequence was in flight at the swap"
        scored = Sampler(new_model).score([list(s.request.prompt) for s in samples],
                                          [s.tokens for s in samples], 1.0)  # fmt: skip
        gaps[recompute] = max(
            float(np.abs(np.asarray(t)[late] - np.asarray(s.policy_logprobs)[late]).max())
            for t, s in zip(scored, samples, strict=True)
            for late in [np.asarray(s.versions) == 1]
        )
    # The weights are scaled 1.5×, so the logits are larger than a checkpoint's and fp32
    # noise is ~1e-5 (how much depends on the CPU's vector width); the keys of the old
    # weights cost several nats.
    assert gaps[True] < 1e-4
    assert gaps[False] > 1e-1


def test_a_three_turn_rollout_is_token_exact(model) -> None:
    """Three model turns, each ended by a stop token or its budget, with an
    environment's reply appended after the first two: the trainer's teacher-forced
    log-probabilities of the whole sequence equal the engine's on every model token
    (within 1e-5), the sequence is what was sampled and appended, and the replies are
    the only positions prefilled after the prompts."""
    engine = Engine(model, slots=2, block_size=4, max_sequence_tokens=96, prefill_chunk=8)
    params = SamplingParams(max_new_tokens=60, temperature=1.0)
    requests = [Request(i, tuple(p), seeds=(i, i + 7), max_new_tokens=60,
                        stop_token_ids=frozenset({7}), multi_turn=True, turn_tokens=9)
                for i, p in enumerate(PROMPTS[:3])]  # fmt: skip
    engine.submit(requests, params)
    replies = {0: (90, 91, 92), 1: (93, 94)}
    appended: dict[int, list[int]] = {}
    turns: dict[int, int] = {}
    done = {}
    while len(done) < len(requests):
        done.update((r.request_id, s) for r, s in engine.step())
        for sample in engine.take_turns():
            turn = turns[id(sample)] = turns.get(id(sample), 0) + 1
            if turn == 3:
                done.update((r.request_id, s) for r, s in engine.end(sample))
                continue
            appended.setdefault(id(sample), []).extend(replies[turn - 1])
            engine.extend(sample, replies[turn - 1], 9)
    samples = [s for i in range(len(requests)) for s in done[i]]
    assert all(turns[id(s)] == 3 for s in samples)
    for sample in samples:
        replied = [t for t, m in zip(sample.tokens, sample.sampled, strict=True) if not m]
        assert replied == appended[id(sample)]
    scored = Sampler(model).score([list(s.request.prompt) for s in samples],
                                  [s.tokens for s in samples], 1.0)  # fmt: skip
    worst = max(
        float(np.abs(np.asarray(t)[m] - np.asarray(s.policy_logprobs)[m]).max())
        for t, s in zip(scored, samples, strict=True)
        for m in [np.asarray(s.sampled)]
    )
    assert worst < 1e-5
    stats = engine.scheduler.stats
    prompts = sum(len(r.prompt) - 1 for r in requests)
    # Per extension, the turn's last token (sampled, not fed yet) and all of its reply
    # but the last token (fed by the next decode step): as many positions as the reply.
    assert stats.prefilled_tokens == prompts + stats.extended_tokens
    assert engine.pool.used == 0


def test_the_engine_records_the_most_likely_tokens_when_asked(model) -> None:
    """With ``top_logprobs``, each sampled token comes with the policy's k most likely
    tokens and their log-probabilities, in order, bursts and single steps alike; the
    completions are those of an engine that records none."""
    params = SamplingParams(max_new_tokens=12, temperature=0.8)
    plain = Engine(model, slots=2, block_size=4, max_sequence_tokens=64, prefill_chunk=8)
    recording = Engine(model, slots=2, block_size=4, max_sequence_tokens=64, prefill_chunk=8,
                       top_logprobs=5)  # fmt: skip
    requests = [Request(i, tuple(p), seeds=(i, i + 3), max_new_tokens=12)
                for i, p in enumerate(PROMPTS)]  # fmt: skip
    outs = []
    for engine in (plain, recording):
        engine.submit(requests, params)
        done = {}
        while len(done) < len(requests):
            done.update((r.request_id, s) for r, s in engine.step())
        outs.append([s for i in range(len(requests)) for s in done[i]])
    assert [s.tokens for s in outs[0]] == [s.tokens for s in outs[1]]
    assert all(not s.top_logprobs for s in outs[0])
    found = 0
    for sample in outs[1]:
        assert len(sample.top_logprobs) == len(sample.tokens)
        for token, policy, (ids, values) in zip(
            sample.tokens, sample.policy_logprobs, sample.top_logprobs, strict=True
        ):
            assert len(ids) == 5 and values == sorted(values, reverse=True)
            assert values[0] >= policy - 1e-6
            if token in ids:
                found += 1
                assert abs(values[ids.index(token)] - policy) < 1e-6
    assert found > 0
