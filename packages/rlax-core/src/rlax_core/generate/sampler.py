"""Batched generation with a KV cache: one jitted prefill + decode loop per shape bucket.

Prompts are left-padded to a bucketed length and the batch to a bucketed size, so a run
compiles once per (batch bucket, prompt bucket, max_new_tokens), however its prompts
vary. Sampling knobs and weights are traced arguments: new weights or a new temperature
never recompile. The decode loop is a ``lax.while_loop`` that stops as soon as every
sequence has produced a stop token.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlax_core.generate.buckets import buckets_up_to
from rlax_core.generate.next_token import SamplingParams, choose, draws
from rlax_core.models.logprobs import teacher_forced_logprobs
from rlax_core.models.params import with_params
from rlax_core.models.qwen import KVCache, Qwen
from rlax_core.models.sharding import BATCH, batch_divisor, batch_sharding

PROMPT_BUCKETS = buckets_up_to(32768)  # 8, 10, 12, 14, 16, 20, … 32768 tokens
MAX_STOP_TOKENS = 8


@dataclass(frozen=True)
class Completions:
    """Sampled completions, one row per prompt.

    Attributes:
        tokens: per completion, its token ids (ending with the stop token if it stopped).
        behaviour_logprobs: per token, log-prob under the distribution sampled from.
        policy_logprobs: per token, log-prob under the untruncated policy.
        finish_reasons: "stop" (a stop token was sampled) or "length".
    """

    tokens: list[list[int]]
    behaviour_logprobs: list[list[float]]
    policy_logprobs: list[list[float]]
    finish_reasons: list[str]


@struct.dataclass
class _SamplingState:
    """The decode loop's carry: what has been sampled so far and what the next step needs.

    Attributes:
        step: () int32, tokens sampled so far (the next one's column in the outputs).
        logits: (batch, vocab) logits of the token to sample next.
        cache: the KV cache, every prompt token and sampled token written.
        cache_valid: (batch, slots) bool, which cache slots hold real tokens.
        tokens: (batch, max_new_tokens) int32, sampled tokens; padding after a stop.
        behaviour_logprobs: (batch, max_new_tokens) fp32, log-prob of each token under
            the distribution it was drawn from; 0 after a stop.
        policy_logprobs: (batch, max_new_tokens) fp32, log-prob of each token under the
            untruncated policy; 0 after a stop.
        lengths: (batch,) int32, tokens sampled per row, its stop token included.
        done: (batch,) bool, the row has sampled a stop token.
        prompt_len: the padded prompt length: the cache slot of the first sampled token.
        max_new_tokens: the most tokens a row samples.
    """

    step: jax.Array
    logits: jax.Array
    cache: KVCache
    cache_valid: jax.Array
    tokens: jax.Array
    behaviour_logprobs: jax.Array
    policy_logprobs: jax.Array
    lengths: jax.Array
    done: jax.Array
    # Static: part of the compiled shape (one compile per bucket), not traced values.
    prompt_len: int = struct.field(pytree_node=False)
    max_new_tokens: int = struct.field(pytree_node=False)


def check_request(
    prompts: Sequence[Sequence[int]], params: SamplingParams, samples_per_prompt: int
) -> None:
    """Raises ValueError, naming what is wrong, for a generation request no engine takes."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one prompt, each with at least one token")
    if samples_per_prompt < 1:
        raise ValueError(f"samples_per_prompt must be at least 1, got {samples_per_prompt}")
    if len(params.stop_token_ids) > MAX_STOP_TOKENS:
        raise ValueError(f"at most {MAX_STOP_TOKENS} stop tokens, got {len(params.stop_token_ids)}")


def completion_seeds(seed: int | Sequence[int], n: int) -> np.ndarray:
    """The seeds of ``n`` completions (uint32): derived from one seed, or given, one each."""
    if isinstance(seed, int):
        return np.random.SeedSequence(seed).generate_state(n).astype(np.uint32)
    if len(seed) != n:
        raise ValueError(f"got {len(seed)} seeds for {n} prompts")
    return (np.asarray(seed, np.uint64) & 0xFFFFFFFF).astype(np.uint32)


class Sampler:
    """Generates from a Qwen model; weights can be swapped without recompiling.

    Args:
        model: the model whose structure (and initial weights) to sample from.
        mesh: shard the batch over its data axes (parameters stay where they are).
        prompt_buckets: allowed padded prompt lengths, ascending.
        pad_token_id: token used for padding (never attended to).
    """

    def __init__(
        self,
        model: Qwen,
        *,
        mesh: Mesh | None = None,
        prompt_buckets: Sequence[int] = PROMPT_BUCKETS,
        pad_token_id: int = 0,
    ) -> None:
        self.config = model.config
        self._graphdef, self._state = nnx.split(model)
        self._mesh = mesh
        self._prompt_buckets = tuple(sorted(prompt_buckets))
        self._pad = pad_token_id
        self._traces = 0
        self._generate = jax.jit(self._generate_impl, static_argnames=("max_new_tokens", "samples"))
        self._score = jax.jit(self._score_impl)

    @property
    def compilations(self) -> int:
        """How many times the generation function has been traced (≈ compiled)."""
        return self._traces

    def set_model(self, model: Qwen) -> None:
        """Samples from ``model``'s weights from now on (same config and sharding)."""
        graphdef, state = nnx.split(model)
        if graphdef != self._graphdef:
            raise ValueError("set_model needs a model with the sampler's structure")
        self._state = state

    def set_params(
        self, params: Mapping[str, np.ndarray | jax.Array], *, in_place: bool = False
    ) -> None:
        """Samples with these weights (name → array, as the parameter store holds them).

        Cheaper than :meth:`set_model`: the arrays go straight into the sampler's state.
        With ``in_place`` the sampler uses the host arrays' memory itself where it can
        (on a CPU: no second copy of the policy); the caller promises never to write to
        them again, as holds for a version fetched from a parameter store.

        Raises:
            KeyError: a parameter is missing.
            ValueError: a shape differs.
        """
        self._state = with_params(self._state, params, in_place=in_place)

    def bucket_shape(self, batch: int, prompt_len: int) -> tuple[int, int]:
        """The padded (batch, prompt length) a request of this size compiles for."""
        i = bisect.bisect_left(self._prompt_buckets, prompt_len)
        if i == len(self._prompt_buckets):
            raise ValueError(
                f"a prompt of {prompt_len} tokens exceeds the longest bucket "
                f"({self._prompt_buckets[-1]}); pass longer prompt_buckets"
            )
        divisor = batch_divisor(self._mesh) if self._mesh is not None else 1
        padded = 1 << max(0, (batch - 1).bit_length())
        padded = -(-max(padded, divisor) // divisor) * divisor
        return padded, self._prompt_buckets[i]

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        seed: int | Sequence[int],
        samples_per_prompt: int = 1,
    ) -> Completions:
        """Samples ``samples_per_prompt`` completions per prompt.

        Args:
            prompts: token ids of each prompt (at least one token each).
            params: sampling settings.
            seed: one seed for the batch, or one per completion. A completion depends
                only on its prompt, its seed and the weights — not on the rest of the
                batch — so an RL run can regenerate any group exactly (pass per-group
                seeds).
            samples_per_prompt: completions per prompt, in prompt-major order. Each
                prompt is prefilled once and its KV cache shared by its samples, which
                then equal those of the prompt repeated with the same seeds.
        """
        check_request(prompts, params, samples_per_prompt)
        batch, prompt_len = self.bucket_shape(len(prompts), max(len(p) for p in prompts))
        tokens = np.full((batch, prompt_len), self._pad, np.int32)
        valid = np.zeros((batch, prompt_len), bool)
        for row, prompt in enumerate(prompts):
            tokens[row, prompt_len - len(prompt) :] = prompt  # left padding
            valid[row, prompt_len - len(prompt) :] = True
        valid[len(prompts) :, -1] = True  # filler rows: one token, discarded
        stops = np.full((MAX_STOP_TOKENS,), -1, np.int32)
        stops[: len(params.stop_token_ids)] = params.stop_token_ids
        # Host arrays and NumPy scalars go to the jitted call as they are: converting
        # each with jnp first would dispatch one small device op per argument, which
        # costs more than a small model's whole prefill.
        tokens_in, valid_in = self._place(tokens), self._place(valid)
        out = self._generate(
            self._state,
            tokens_in,
            valid_in,
            self._row_seeds(seed, batch * samples_per_prompt, len(prompts) * samples_per_prompt),
            np.float32(params.temperature),
            np.int32(params.top_k),
            np.float32(params.top_p),
            stops,
            max_new_tokens=params.max_new_tokens,
            samples=samples_per_prompt,
        )
        new_tokens, behaviour, policy, lengths, stopped = jax.device_get(out)
        n = len(prompts) * samples_per_prompt
        return Completions(
            tokens=[new_tokens[i, : lengths[i]].tolist() for i in range(n)],
            behaviour_logprobs=[behaviour[i, : lengths[i]].tolist() for i in range(n)],
            policy_logprobs=[policy[i, : lengths[i]].tolist() for i in range(n)],
            finish_reasons=["stop" if stopped[i] else "length" for i in range(n)],
        )

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        temperature: float,
    ) -> list[list[float]]:
        """Teacher-forced log-probabilities of each completion token under the weights.

        The training graph's view of the sampled tokens (the whole sequence in one
        forward pass, as the trainer computes it), for checking the sampler's own
        log-probabilities: the two must agree within 1e-5 in fp32.
        """
        lengths = [len(p) + len(c) for p, c in zip(prompts, completions, strict=True)]
        batch, width = self.bucket_shape(len(prompts), max(lengths))
        tokens = np.zeros((batch, width), np.int32)
        valid = np.zeros((batch, width), bool)
        for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            tokens[row, : lengths[row]] = [*prompt, *completion]
            valid[row, : lengths[row]] = True
        tokens_in, valid_in = self._place(tokens), self._place(valid)
        scores = np.asarray(self._score(self._state, tokens_in, valid_in, np.float32(temperature)))
        return [
            scores[row, len(p) - 1 : len(p) - 1 + len(c)].tolist()
            for row, (p, c) in enumerate(zip(prompts, completions, strict=True))
        ]

    def _score_impl(
        self, state: nnx.State, tokens: jax.Array, valid: jax.Array, temperature: jax.Array
    ) -> jax.Array:
        model = nnx.merge(self._graphdef, state)
        return teacher_forced_logprobs(model, tokens, valid, temperature)

    def _place(self, rows: np.ndarray) -> np.ndarray | jax.Array:
        """A per-row host array, split over the mesh's data axes when there is a mesh."""
        if self._mesh is None:
            return rows
        return jax.device_put(rows, batch_sharding(self._mesh))

    @staticmethod
    def _row_seeds(seed: int | Sequence[int], batch: int, n: int) -> np.ndarray:
        out = np.zeros(batch, np.uint32)
        out[:n] = completion_seeds(seed, n)
        return out

    def _generate_impl(
        self,
        state: nnx.State,
        tokens: jax.Array,
        valid: jax.Array,
        seeds: jax.Array,
        temperature: jax.Array,
        top_k: jax.Array,
        top_p: jax.Array,
        stop_ids: jax.Array,
        *,
        max_new_tokens: int,
        samples: int,
    ) -> tuple[jax.Array, ...]:
        self._traces += 1  # runs once per trace: counts compilations
        model = nnx.merge(self._graphdef, state)
        prompts, prompt_len = tokens.shape
        batch = prompts * samples
        slots = prompt_len + max_new_tokens
        cache = [
            (self._constrain(k), self._constrain(v)) for k, v in model.init_cache(prompts, slots)
        ]
        cache_valid = jnp.zeros((prompts, slots), bool).at[:, :prompt_len].set(valid)
        positions = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0)
        prefill = model(
            tokens,
            valid,
            positions=positions,
            cache=cache,
            cache_index=0,
            cache_valid=cache_valid,
            logits_at=jnp.full((prompts, 1), prompt_len - 1),
        )
        logits, cache = prefill.logits, prefill.cache
        next_position = valid.sum(axis=1)  # position of the first generated token
        if samples > 1:  # each prompt was prefilled once: its samples share the cache

            def share(x: jax.Array) -> jax.Array:
                return jnp.repeat(x, samples, axis=0)

            cache = [(self._constrain(share(k)), self._constrain(share(v))) for k, v in cache]
            logits, cache_valid, next_position = map(share, (logits, cache_valid, next_position))
        # Every draw of the run at once, one row per sequence from its own seed: a row's
        # samples do not depend on the rest of the batch, and the loop derives no keys.
        uniforms = draws(seeds[:, None], jnp.arange(max_new_tokens)[None, :])

        def sample_and_advance(s: _SamplingState) -> _SamplingState:
            # One token per row from the current logits, then (unless this was the last
            # step) one decode step for the next logits. Sampling lives in one place of
            # the loop body, so it is compiled once.
            draws = jax.lax.dynamic_index_in_dim(uniforms, s.step, axis=1, keepdims=False)
            token, b_lp, p_lp = choose(s.logits, draws, temperature, top_k, top_p)
            token = jnp.where(s.done, self._pad, token)
            out_tokens = s.tokens.at[:, s.step].set(token)
            out_b = s.behaviour_logprobs.at[:, s.step].set(jnp.where(s.done, 0.0, b_lp))
            out_p = s.policy_logprobs.at[:, s.step].set(jnp.where(s.done, 0.0, p_lp))
            lengths = s.lengths + (~s.done).astype(jnp.int32)
            done = s.done | jnp.isin(token, stop_ids)

            def decode(operands: tuple) -> tuple:
                cache, cache_valid = operands
                slot = s.prompt_len + s.step  # where this token's keys and values go
                cache_valid = cache_valid.at[:, slot].set(True)
                out = model(
                    token[:, None],
                    positions=(next_position + s.step)[:, None],
                    cache=cache,
                    cache_index=slot,
                    cache_valid=cache_valid,
                )
                return out.logits[:, 0], out.cache, cache_valid

            more = (s.step + 1 < s.max_new_tokens) & ~jnp.all(done)
            logits, cache, cache_valid = jax.lax.cond(
                more, decode, lambda ops: (s.logits, *ops), (s.cache, s.cache_valid)
            )
            return s.replace(
                step=s.step + 1,
                logits=logits,
                cache=cache,
                cache_valid=cache_valid,
                tokens=out_tokens,
                behaviour_logprobs=out_b,
                policy_logprobs=out_p,
                lengths=lengths,
                done=done,
            )

        def keep_going(s: _SamplingState) -> jax.Array:
            return (s.step < s.max_new_tokens) & ~jnp.all(s.done)

        initial = _SamplingState(
            step=jnp.int32(0),
            logits=logits[:, -1],
            cache=cache,
            cache_valid=cache_valid,
            tokens=jnp.full((batch, max_new_tokens), self._pad, jnp.int32),
            behaviour_logprobs=jnp.zeros((batch, max_new_tokens), jnp.float32),
            policy_logprobs=jnp.zeros((batch, max_new_tokens), jnp.float32),
            lengths=jnp.zeros((batch,), jnp.int32),
            done=jnp.zeros((batch,), bool),
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
        )
        final = jax.lax.while_loop(keep_going, sample_and_advance, initial)
        return (
            final.tokens,
            final.behaviour_logprobs,
            final.policy_logprobs,
            final.lengths,
            final.done,
        )

    def _constrain(self, kv: jax.Array) -> jax.Array:
        if self._mesh is None:
            return kv
        heads = "tensor" if kv.shape[1] % self._mesh.shape["tensor"] == 0 else None
        spec = PartitionSpec(BATCH, heads, None, None)
        return jax.lax.with_sharding_constraint(kv, NamedSharding(self._mesh, spec))
