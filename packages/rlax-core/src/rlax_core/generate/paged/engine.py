"""The rollout engine: continuous batching over a paged KV cache, in JAX.

A fixed number of decode slots run one jitted step at a time: every occupied slot feeds
its sequence's newest token and samples the next, and one chunk of a prompt is
prefilled beside them. A sequence that finishes frees its slot (and its KV blocks) for
the next one at the next step, so long and short completions share the machine without
a batch waiting for its longest row. :mod:`rlax_core.generate.paged.scheduler` decides
each step's work; this module turns it into arrays and runs it.

While no prompt is being prefilled, a call runs a burst of up to ``decode_burst`` decode
steps on the device (a loop inside one jitted function), each feeding the tokens the
one before sampled, so the host's bookkeeping and the round trip to the device are paid
once per burst, not once per token; the burst ends as soon as a sequence finishes and
other work waits for its slot. Where the burst's rows see near-equal numbers of blocks,
it gathers them once into a contiguous copy, laid out as a static cache, which its
steps extend and read with the static sampler's decode attention; where they are
unequal (a long tail), the steps read the pool through the block tables, whose cost
follows the blocks in use.

Shapes are static: a step with a prefill compiles once per prefill-chunk bucket (a
power of two up to ``prefill_chunk``), a step without one once per decode-row bucket,
and a burst once per decode-row bucket and width of contiguous copy (none, or a power
of two of blocks up to a sequence's most) and per power of two of stop tokens a
request names, however the requests vary. Decode rows are packed, whatever their slots: a step runs
the fewest rows of a bucket (a power of two from ``MIN_ROWS`` up to the slots) that
holds the sequences decoding, so the long tail of a batch, where few sequences are
left, does not pay for the slots they left. Keys and values live in one
pool of blocks per layer, so memory follows the tokens in flight, not slots × the
longest sequence.

The sampler's contract holds: behaviour and untruncated policy log-probabilities per
token, equal to the trainer's teacher-forced ones within 1e-5 in fp32, and a completion
that depends only on the weights, its prompt and its seed (the draws are
:func:`rlax_core.generate.next_token.draws` of the seed and the token's index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlax_core.generate.next_token import SamplingParams, choose, draws
from rlax_core.generate.paged.attention import PagedAttention, paged_attention
from rlax_core.generate.paged.blocks import SCRATCH_BLOCK, BlockPool
from rlax_core.generate.paged.contiguous import (
    attend_contiguous,
    copy_width,
    extend_contiguous,
    gather_contiguous,
    most_copied,
    width_bucket,
)
from rlax_core.generate.paged.scheduler import (
    MAX_PREFILL_SEGMENTS,
    PrefillChunk,
    Request,
    Sample,
    Scheduler,
    StepPlan,
)
from rlax_core.generate.paged.weights import EngineWeights
from rlax_core.generate.sampler import Completions, check_request, completion_seeds
from rlax_core.models.logprobs import policy_log_softmax
from rlax_core.models.qwen import Qwen
from rlax_core.models.qwen.layers import rope_tables

MIN_CHUNK = 8  # the smallest prefill-chunk bucket
MIN_ROWS = 8  # the smallest decode-row bucket (fewer rows read the weights as slowly)


class Engine:
    """Generates from a Qwen model with continuous batching; weights swap without
    recompiling.

    Args:
        model: the model whose structure (and initial weights) to sample from.
        slots: sequences decoding at once.
        block_size: token positions per KV block.
        max_sequence_tokens: the longest sequence (prompt and completion) it takes.
        kv_tokens: token positions the KV pool holds across all sequences (default:
            every slot at ``max_sequence_tokens``, which never preempts); less memory
            means admission waits and preemptions when many long sequences meet.
        prefill_chunk: the most prompt positions prefilled in one step.
        decode_burst: the most decode steps run in one call to the device (1: one at a
            time).
        pad_token_id: the token fed to idle slots.
        attention: the paged attention (a kernel may replace it: ``ragged_kernel_attention``).
        top_logprobs: per sampled token, also record the ids and policy log-probabilities
            of this many most likely tokens (``Sample.top_logprobs``; what an
            OpenAI-compatible endpoint reports); 0: none, and nothing is computed.
        contiguous_bursts: let a burst whose rows' contexts are near-equal in length read a
            contiguous copy of their blocks, gathered once per burst, instead of the
            pool through ``attention`` (False: every step calls ``attention``, as a
            kernel that reads the pool directly would want).
        input_major: hold the decoder layers' linear weights transposed, as a CPU's dot
            reads them fastest (None: on a CPU; see
            :mod:`rlax_core.generate.paged.weights`).
    """

    def __init__(
        self,
        model: Qwen,
        *,
        slots: int = 16,
        block_size: int = 16,
        max_sequence_tokens: int = 4096,
        kv_tokens: int | None = None,
        prefill_chunk: int = 128,
        decode_burst: int = 16,
        pad_token_id: int = 0,
        attention: PagedAttention = paged_attention,
        top_logprobs: int = 0,
        contiguous_bursts: bool = True,
        input_major: bool | None = None,
    ) -> None:
        if decode_burst < 1:
            raise ValueError(f"decode_burst must be at least 1, got {decode_burst}")
        self.config = model.config
        self._weights = EngineWeights(model, input_major=input_major)
        self.slots = slots
        self.block_size = block_size
        self.max_blocks = -(-max_sequence_tokens // block_size)
        self.prefill_chunk = 1 << max(0, (prefill_chunk - 1).bit_length())
        # A chunk's segments' tables side by side: the first may be a long history's,
        # the others start at 0 and share the chunk's positions.
        self._chunk_blocks = (self.max_blocks + self.prefill_chunk // block_size
                              + MAX_PREFILL_SEGMENTS)  # fmt: skip
        kv_tokens = slots * max_sequence_tokens if kv_tokens is None else kv_tokens
        self.pool = BlockPool(-(-kv_tokens // block_size) + 1, block_size)  # + the scratch block
        self.scheduler = Scheduler(slots=slots, pool=self.pool, prefill_chunk=self.prefill_chunk,
                                   max_blocks_per_sequence=self.max_blocks)  # fmt: skip
        self._pad = pad_token_id
        self._attention = attention
        self.top_logprobs = top_logprobs
        c = self.config
        shape = (self.pool.num_blocks, c.num_kv_heads, block_size, c.head_dim)
        self._kv = [(jnp.zeros(shape, c.dtype), jnp.zeros(shape, c.dtype))
                    for _ in range(c.num_layers)]  # fmt: skip
        self.block_bytes = self.kv_bytes // self.pool.num_blocks  # one block, every layer
        self._knobs = (np.float32(1.0), np.int32(0), np.float32(1.0))
        self.version = 0  # the policy version of the weights, recorded with every token
        self.decode_burst = decode_burst
        self.contiguous_bursts = contiguous_bursts
        self.bursts_by_width: Counter[int] = Counter()  # contiguous blocks a row (0: paged)
        self.peak_contiguous_bytes = 0  # the largest contiguous copy a burst held, all layers
        self.peak_kv_bytes = 0  # the most a call held: the pool's blocks in use and its copy
        self._stop_width = 1  # stop tokens per row a burst checks (a power of two)
        self._traces = 0
        self.launches_by_rows: Counter[int] = Counter()  # decode rows run → calls
        self._step = jax.jit(self._step_impl, donate_argnums=1)
        self._burst = jax.jit(self._burst_impl, donate_argnums=1)

    @property
    def compilations(self) -> int:
        """How many times the step function has been traced (≈ compiled)."""
        return self._traces

    @property
    def kv_bytes(self) -> int:
        """Bytes of the KV pool (every layer's keys and values)."""
        return sum(k.nbytes + v.nbytes for k, v in self._kv)

    def set_model(self, model: Qwen, *, version: int | None = None) -> None:
        """Samples from ``model``'s weights from the next step on (same config).

        Sequences in flight keep going: their next tokens come from the new weights,
        over keys and values the old ones computed. ``version`` names the policy in
        each new token's record (unchanged if None).
        """
        graphdef, state = nnx.split(model)
        if graphdef != self._weights.structure:
            raise ValueError("set_model needs a model with the engine's structure")
        self._weights.use(state)
        self.version = self.version if version is None else version

    def set_params(
        self,
        params: Mapping[str, np.ndarray | jax.Array],
        *,
        in_place: bool = False,
        version: int | None = None,
    ) -> None:
        """Samples with these weights (name → array) from the next step on, as
        :meth:`set_model` does; ``in_place`` as :meth:`Sampler.set_params`."""
        self._weights.set_params(params, in_place=in_place)
        self.version = self.version if version is None else version

    def recompute(self) -> int:
        """Drops the keys and values computed with older weights: every sequence in
        flight is prefilled again from its history with the current ones (after
        :meth:`set_params`, for a completion's later tokens to see only the new policy's
        keys). Returns how many sequences and prompts it dropped."""
        return self.scheduler.recompute()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        seed: int | Sequence[int],
        samples_per_prompt: int = 1,
        budgets: Sequence[int] | None = None,
    ) -> Completions:
        """Samples ``samples_per_prompt`` completions per prompt, as
        :meth:`rlax_core.generate.Sampler.generate` does (the same arguments and result).

        Args:
            budgets: per completion (prompt-major), its own most new tokens instead of
                ``params.max_new_tokens``.

        Raises:
            ValueError: a bad request, or one longer than ``max_sequence_tokens``.
            RuntimeError: the engine is busy with requests of another call.
        """
        check_request(prompts, params, samples_per_prompt)
        if not self.scheduler.idle:
            raise RuntimeError("the engine is still running other requests")
        n = samples_per_prompt
        seeds = completion_seeds(seed, len(prompts) * n)
        if budgets is not None and len(budgets) != len(seeds):
            raise ValueError(f"got {len(budgets)} budgets for {len(seeds)} completions")
        requests = [
            Request(i, tuple(int(t) for t in prompt), tuple(int(s) for s in seeds[i * n :][:n]),
                    params.max_new_tokens, frozenset(params.stop_token_ids),
                    budgets=() if budgets is None else tuple(budgets[i * n :][:n]))
            for i, prompt in enumerate(prompts)
        ]  # fmt: skip
        self.submit(requests, params)
        done: dict[int, list[Sample]] = {}
        while len(done) < len(requests):
            done.update((request.request_id, samples) for request, samples in self.step())
        ordered = [sample for i in range(len(requests)) for sample in done[i]]
        return Completions(
            tokens=[s.tokens for s in ordered],
            behaviour_logprobs=[s.behaviour_logprobs for s in ordered],
            policy_logprobs=[s.policy_logprobs for s in ordered],
            finish_reasons=[s.finish_reason or "length" for s in ordered],
        )

    def submit(self, requests: Sequence[Request], params: SamplingParams) -> None:
        """Queues requests, sampled with ``params``' temperature, top-k and top-p (their
        budgets and stop tokens are their own); :meth:`step` returns their samples.

        Raises:
            ValueError: a request that can never fit (none of them is queued then).
            RuntimeError: requests in flight sample with other settings.
        """
        knobs = (np.float32(params.temperature), np.int32(params.top_k), np.float32(params.top_p))
        if not self.scheduler.idle and knobs != self._knobs:
            raise RuntimeError(
                "requests in flight sample with another temperature, top-k or top-p; "
                "submit these once the engine is idle"
            )
        for request in requests:  # all of them, before any is queued
            self.scheduler.check(request)
        for request in requests:
            self.scheduler.add(request)
            stops = len(request.stop_token_ids)
            if stops > self._stop_width:  # a power of two: few widths, few compilations
                self._stop_width = 1 << (stops - 1).bit_length()
        self._knobs = knobs

    def step(self) -> list[tuple[Request, list[Sample]]]:
        """Runs one step (if anything is queued or running); returns the requests whose
        samples have all finished, each with its samples in order. Multi-turn samples
        whose turn ended wait in :meth:`take_turns`."""
        if not self.scheduler.busy:
            return []
        plan = self.scheduler.plan(self.decode_burst)
        return self.scheduler.commit(plan, self.run(plan), self.version)

    def take_turns(self) -> list[Sample]:
        """The multi-turn samples whose turn ended since the last call, each waiting to
        be extended (:meth:`extend`) or ended (:meth:`end`); see
        :meth:`Scheduler.take_turns`."""
        return self.scheduler.take_turns()

    def extend(self, sample: Sample, tokens: Sequence[int], max_new_tokens: int) -> None:
        """Appends an environment's tokens to a paused sample and lets it sample its next
        turn from its cached prefix; see :meth:`Scheduler.extend`."""
        self.scheduler.extend(sample, tokens, max_new_tokens)

    def end(self, sample: Sample) -> list[tuple[Request, list[Sample]]]:
        """Ends a paused sample; its request if it was the last; see
        :meth:`Scheduler.end`."""
        return self.scheduler.end(sample)

    def stop(self, sample: Sample) -> list[tuple[Request, list[Sample]]]:
        """Ends a sample now (a caller's stop condition); see :meth:`Scheduler.stop`."""
        return self.scheduler.stop(sample)

    def cancel(self, request_id) -> None:
        """Drops a request and everything it holds; see :meth:`Scheduler.cancel`."""
        self.scheduler.cancel(request_id)

    @property
    def chunk_buckets(self) -> tuple[int, ...]:
        """The prefill-chunk lengths a step compiles for (0: a step without a prefill)."""
        longest = min(self.prefill_chunk, self.max_blocks * self.block_size - 1)
        return (0, *sorted({_chunk_bucket(n) for n in range(1, longest + 1)}))

    @property
    def row_buckets(self) -> tuple[int, ...]:
        """The decode-row counts a step without a prefill, and a burst, compile for."""
        return tuple(sorted({self._rows(n) for n in range(1, self.slots + 1)}))

    def warm_up(self) -> None:
        """Compiles every step shape now (one step each, touching no sequence's keys),
        so that no compilation lands in the middle of a run."""
        longest = self.max_blocks * self.block_size - 1
        for size in self.chunk_buckets[1:]:
            n = min(size, longest)
            chunk = PrefillChunk((self._pad,) * n, 0, (SCRATCH_BLOCK,) * self.pool.blocks_for(n))
            self._run_step(StepPlan(copies=(), decode=(), prefill=(chunk,)), self.slots)
        for rows in self.row_buckets:
            self._run_step(StepPlan(copies=(), decode=(), prefill=()), rows)
            if self.decode_burst > 1:
                plan = StepPlan(copies=(), decode=(), prefill=(), steps=self.decode_burst)
                for width in self.width_buckets:
                    if rows * width <= most_copied(self.pool.capacity):  # else never chosen
                        self._run_burst(plan, rows, width)

    @property
    def width_buckets(self) -> tuple[int, ...]:
        """The blocks per row a burst's contiguous copy holds (0: none, the pool is read
        through the block tables); a burst compiles once per width and row bucket."""
        if not self.contiguous_bursts:
            return (0,)
        most = self.max_blocks
        return (0, *sorted({width_bucket(n, most) for n in range(1, most + 1)}))

    def _contiguous_width(self, plan: StepPlan, rows: int) -> int:
        """A burst's contiguous copy's blocks per row, or 0 where it reads the pool."""
        if not self.contiguous_bursts or not plan.decode:
            return 0
        most_blocks = most_copied(self.pool.capacity)
        return copy_width(plan, rows, self.block_size, self.max_blocks, most_blocks)

    def _rows(self, decoding: int) -> int:
        """The decode rows a step without a prefill runs for ``decoding`` sequences."""
        return min(self.slots, max(MIN_ROWS, 1 << max(0, decoding - 1).bit_length()))

    def run(self, plan: StepPlan) -> list[list[tuple[int, float, float]]]:
        """Runs one planned step (or burst); returns per decode row the (token, behaviour,
        policy log-prob) of each decode step it ran."""
        rows = self.slots if plan.prefill else self._rows(len(plan.decode))
        width = self._contiguous_width(plan, rows) if plan.steps > 1 else 0
        copied = rows * width * self.block_bytes
        self.peak_contiguous_bytes = max(self.peak_contiguous_bytes, copied)
        self.peak_kv_bytes = max(self.peak_kv_bytes, self.pool.used * self.block_bytes + copied)
        if plan.steps > 1:
            return self._run_burst(plan, rows, width)
        return self._run_step(plan, rows)

    def _run_step(self, plan: StepPlan, rows: int) -> list[list[tuple[int, float, float]]]:
        self.launches_by_rows[rows] += 1
        size = self.block_size
        n = sum(len(segment.tokens) for segment in plan.prefill)
        chunk = _chunk_bucket(n) if n else 0
        tokens = np.full(rows + chunk, self._pad, np.int32)
        positions = np.full(rows + chunk, -1, np.int32)
        write_blocks = np.full(rows + chunk, SCRATCH_BLOCK, np.int32)
        write_offsets = np.zeros(rows + chunk, np.int32)
        decode_tables = np.full((rows, self.max_blocks), SCRATCH_BLOCK, np.int32)
        seeds = np.zeros(rows, np.uint32)
        indices = np.zeros(rows, np.int32)
        for i, row in enumerate(plan.decode):  # packed: a row's slot is the host's affair
            tokens[i], positions[i] = row.token, row.position
            decode_tables[i, : len(row.blocks)] = row.blocks
            write_blocks[i] = row.blocks[row.position // size]
            write_offsets[i] = row.position % size
            seeds[i], indices[i] = row.sample.seed, len(row.sample.tokens)
        # The segments' tables side by side in one row: a query's position there (its
        # segment's first column's, plus its own) and its segment's first position bound
        # what it sees, so each sees its own history only.
        chunk_table = np.full((1, self._chunk_blocks), SCRATCH_BLOCK, np.int32)
        in_table = np.full((1, chunk), -1, np.int32)
        starts = np.zeros((1, chunk), np.int32)
        query, column = 0, 0
        for segment in plan.prefill:
            count, blocks = len(segment.tokens), np.asarray(segment.blocks)
            at = segment.start + np.arange(count)
            here = slice(rows + query, rows + query + count)
            tokens[here], positions[here] = segment.tokens, at
            write_blocks[here], write_offsets[here] = blocks[at // size], at % size
            chunk_table[0, column : column + len(blocks)] = blocks
            in_table[0, query : query + count] = column * size + at
            starts[0, query : query + count] = column * size
            query, column = query + count, column + len(blocks)
        copies = np.full((self.slots, 2), SCRATCH_BLOCK, np.int32)
        if plan.copies:
            copies[: len(plan.copies)] = plan.copies
        self._kv, *out = self._step(
            self._weights.leaves, self._kv, tokens, positions, write_blocks, write_offsets,
            decode_tables, chunk_table, in_table, starts, copies, seeds, indices, *self._knobs,
        )  # fmt: skip
        sampled, behaviour, policy, *top = jax.device_get(out)
        return [[(sampled[i], behaviour[i], policy[i], *(t[i] for t in top))]
                for i in range(len(plan.decode))]  # fmt: skip

    def _run_burst(
        self, plan: StepPlan, rows: int, width: int
    ) -> list[list[tuple[int, float, float]]]:
        if plan.steps != self.decode_burst:
            raise ValueError(f"a burst of {plan.steps} steps; this engine runs {self.decode_burst}")
        self.launches_by_rows[rows] += 1
        self.bursts_by_width[width] += 1
        tokens = np.full(rows, self._pad, np.int32)
        positions = np.full(rows, -1, np.int32)
        tables = np.full((rows, self.max_blocks), SCRATCH_BLOCK, np.int32)
        seeds = np.zeros(rows, np.uint32)
        indices = np.zeros(rows, np.int32)
        left = np.ones(rows, np.int32)
        stops = np.full((rows, self._stop_width), -1, np.int32)
        for i, row in enumerate(plan.decode):
            sample = row.sample
            tokens[i], positions[i] = row.token, row.position
            tables[i, : len(row.blocks)] = row.blocks
            seeds[i], indices[i] = sample.seed, len(sample.tokens)
            left[i] = sample.limit - len(sample.tokens)
            stop = sorted(sample.request.stop_token_ids)
            stops[i, : len(stop)] = stop
        copies = np.full((self.slots, 2), SCRATCH_BLOCK, np.int32)
        if plan.copies:
            copies[: len(plan.copies)] = plan.copies
        self._kv, *out = self._burst(
            self._weights.leaves, self._kv, tokens, positions, tables, tables[:, :width], copies,
            seeds, indices, left, stops, np.bool_(plan.until_finish), *self._knobs,
        )  # fmt: skip
        ran, *steps = jax.device_get(out)
        return [list(zip(*(a[:ran, i] for a in steps), strict=True))
                for i in range(len(plan.decode))]  # fmt: skip

    def _step_impl(
        self,
        leaves: list[jax.Array],
        kv: list[tuple[jax.Array, jax.Array]],
        tokens: jax.Array,
        positions: jax.Array,
        write_blocks: jax.Array,
        write_offsets: jax.Array,
        decode_tables: jax.Array,
        chunk_table: jax.Array,
        in_table: jax.Array,
        starts: jax.Array,
        copies: jax.Array,
        seeds: jax.Array,
        indices: jax.Array,
        temperature: jax.Array,
        top_k: jax.Array,
        top_p: jax.Array,
    ) -> tuple:
        """One step: block copies, then every token's keys written and attended to;
        the decode rows' next tokens sampled."""
        self._traces += 1  # runs once per trace: counts compilations
        model = self._weights.model(leaves)
        kv = _copy_blocks(kv, copies)
        kv, logits = self._forward(model, kv, tokens, positions, write_blocks, write_offsets,
                                   decode_tables, (chunk_table, in_table, starts))  # fmt: skip
        drawn = choose(logits, draws(seeds, indices), temperature, top_k, top_p)
        return kv, *drawn, *self._top(logits, temperature)

    def _burst_impl(
        self,
        leaves: list[jax.Array],
        kv: list[tuple[jax.Array, jax.Array]],
        tokens: jax.Array,
        positions: jax.Array,
        tables: jax.Array,
        copy_tables: jax.Array,
        copies: jax.Array,
        seeds: jax.Array,
        indices: jax.Array,
        left: jax.Array,
        stops: jax.Array,
        until_finish: jax.Array,
        temperature: jax.Array,
        top_k: jax.Array,
        top_p: jax.Array,
    ) -> tuple:
        """Up to ``decode_burst`` decode steps, each row feeding what it sampled in the
        one before; a row stops at a stop token or when its ``left`` tokens are sampled
        (its later steps write to the scratch block and see nothing). ``copy_tables``:
        the first columns of ``tables`` whose blocks are gathered into a contiguous copy
        that the burst's steps read and extend (no columns: they read the pool). Returns
        the steps run and, per step and row, the token and its log-probabilities."""
        self._traces += 1
        model = self._weights.model(leaves)
        kv = _copy_blocks(kv, copies)
        contiguous = [tuple(gather_contiguous(pool, copy_tables) for pool in layer) for layer in kv]
        steps, slots, size = self.decode_burst, tokens.shape[0], self.block_size
        k = self.top_logprobs
        out = (jnp.zeros((steps, slots), jnp.int32), jnp.zeros((steps, slots), jnp.float32),
               jnp.zeros((steps, slots), jnp.float32))  # fmt: skip
        if k:
            out += (jnp.zeros((steps, slots, k), jnp.int32),
                    jnp.zeros((steps, slots, k), jnp.float32))  # fmt: skip

        def running(carry: tuple) -> jax.Array:
            t, _, _, _, _, active, finished, _ = carry
            return (t < steps) & jnp.any(active) & ~(until_finish & finished)

        def decode(carry: tuple) -> tuple:
            t, kv, contiguous, tokens, positions, active, finished, out = carry
            at = jnp.where(active, positions, -1)
            block = jnp.take_along_axis(tables, (jnp.maximum(at, 0) // size)[:, None], 1)[:, 0]
            (kv, contiguous), logits = self._forward(
                model, kv, tokens, at, jnp.where(active, block, SCRATCH_BLOCK),
                jnp.where(active, at % size, 0), tables, None, contiguous,
            )  # fmt: skip
            drawn = choose(logits, draws(seeds, indices + t), temperature, top_k, top_p)
            drawn = (*drawn, *self._top(logits, temperature))
            out = tuple(o.at[t].set(d) for o, d in zip(out, drawn, strict=True))
            token = drawn[0]
            done = active & ((t + 1 >= left) | jnp.any(token[:, None] == stops, axis=1))
            return (t + 1, kv, contiguous, token, positions + 1, active & ~done,
                    finished | jnp.any(done), out)  # fmt: skip

        start = (
            jnp.int32(0),
            kv,
            contiguous,
            tokens,
            positions,
            positions >= 0,
            jnp.bool_(False),
            out,
        )
        ran, kv, _, _, _, _, _, out = jax.lax.while_loop(running, decode, start)
        return kv, ran, *out

    def _top(self, logits: jax.Array, temperature: jax.Array) -> tuple[jax.Array, ...]:
        """(ids, policy log-probabilities) of each row's ``top_logprobs`` most likely
        tokens; () when none are asked for."""
        if not self.top_logprobs:
            return ()
        values, ids = jax.lax.top_k(policy_log_softmax(logits, temperature), self.top_logprobs)
        return ids.astype(jnp.int32), values

    def _forward(
        self,
        model: Qwen,
        kv: list[tuple[jax.Array, jax.Array]],
        tokens: jax.Array,
        positions: jax.Array,
        write_blocks: jax.Array,
        write_offsets: jax.Array,
        decode_tables: jax.Array,
        chunk: tuple[jax.Array, jax.Array, jax.Array] | None,
        contiguous: list[tuple[jax.Array, jax.Array]] | None = None,
    ) -> tuple:
        """The model over one step's tokens (the decode rows', then a prefill chunk's):
        their keys written into the pools, attention read from them; the new pools and
        the decode rows' logits. ``chunk``: the prefill's table row, its queries'
        positions in that row and their segments' first positions there. ``contiguous``: per
        layer, a contiguous copy of the decode rows' blocks (rows, kv_heads, positions,
        head_dim), or empty ones: given, the decode rows' keys are written there too and
        their attention reads it, and the new pools come back with the new copies."""
        c = self.config
        slots = decode_tables.shape[0]
        scale = c.head_dim**-0.5
        rope = rope_tables(jnp.maximum(positions, 0)[None], c.head_dim, c.rope_theta)
        x = model.model.embed_tokens(tokens[None])
        written, copies = [], []
        for i, (layer, (k_pool, v_pool)) in enumerate(zip(model.model.layers, kv, strict=True)):
            attention = layer.self_attn
            q, k, v = attention.project(layer.input_layernorm(x), rope)
            k_pool = k_pool.at[write_blocks, :, write_offsets].set(k[0].astype(k_pool.dtype))
            v_pool = v_pool.at[write_blocks, :, write_offsets].set(v[0].astype(v_pool.dtype))
            if contiguous is not None and contiguous[i][0].shape[2]:
                copy = extend_contiguous(
                    contiguous[i], k[0, :slots], v[0, :slots], positions[:slots]
                )
                copies.append(copy)
                attended = attend_contiguous(q[0, :slots], *copy, positions[:slots], scale)
            else:
                attended = self._attention(q[0, :slots, None], k_pool, v_pool, decode_tables,
                                           positions[:slots, None], scale)[:, 0]  # fmt: skip
            if tokens.shape[0] > slots:
                table, in_table, starts = chunk
                prefilled = self._attention(
                    q[:, slots:], k_pool, v_pool, table, in_table, scale, starts=starts
                )[0]
                attended = jnp.concatenate([attended, prefilled], axis=0)
            x = layer.finish(x, attention.output(attended[None]))
            written.append((k_pool, v_pool))
        logits = model.logits_from_hidden(model.model.norm(x[:, :slots]))[0]
        if contiguous is None:
            return written, logits
        return (written, copies or contiguous), logits


def _copy_blocks(kv: list[tuple[jax.Array, jax.Array]], copies: jax.Array) -> list:
    """Each pool with blocks ``copies[:, 0]`` copied onto ``copies[:, 1]``."""
    source, destination = copies[:, 0], copies[:, 1]
    return [(k.at[destination].set(k[source]), v.at[destination].set(v[source])) for k, v in kv]


def _chunk_bucket(positions: int) -> int:
    """The padded length of a prefill chunk: a power of two, at least ``MIN_CHUNK``."""
    return max(MIN_CHUNK, 1 << (positions - 1).bit_length())
