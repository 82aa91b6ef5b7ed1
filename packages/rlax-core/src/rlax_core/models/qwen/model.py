"""The Qwen2 / Qwen3 causal language model in Flax NNX.

Module and parameter names are Hugging Face's (``model.layers.0.self_attn.q_proj.weight``),
so a checkpoint's tensor names are this model's parameter paths.

One forward pass serves training and sampling. Tokens sit in *slots*: without a cache,
slot ``i`` is position ``i`` of the input; with a cache, the input's keys and values are
written at ``cache_index`` and queries see every valid slot up to their own. A query may
see a key iff ``key_slot <= query_slot`` and the key slot holds a real token, so left
padding (batched prompts of different lengths) needs no other mechanism.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from rlax_core.models.qwen.config import QwenConfig
from rlax_core.models.qwen.layers import MLP, Attention, Embedding, Linear, RMSNorm, rope_tables

KVCache = list[tuple[jax.Array, jax.Array]]


@struct.dataclass
class QwenOutput:
    """What one forward pass of :class:`Qwen` returns (a pytree: it leaves jit as it is).

    Attributes:
        logits: fp32 logits, (batch, length, vocab), or (batch, k, vocab) with ``logits_at``.
        cache: the KV cache with this call's keys and values written; None without a cache.
        hidden_states: with ``return_hidden_states``, the hidden states after the
            embedding and after each layer (the last one after the final norm), as HF
            returns them; None otherwise.
        final_hidden: with ``head=False``, the final norm's output (at ``logits_at``
            when given) instead of ``logits``, which is then None.
    """

    logits: jax.Array | None
    cache: KVCache | None = None
    hidden_states: list[jax.Array] | None = None
    final_hidden: jax.Array | None = None


class DecoderLayer(nnx.Module):
    """Pre-norm attention and MLP blocks with residual connections."""

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        self.input_layernorm = RMSNorm(config.hidden_size, config=config)
        self.self_attn = Attention(config, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config=config)
        self.mlp = MLP(config, rngs=rngs)

    def __call__(
        self,
        x: jax.Array,
        rope: tuple[jax.Array, jax.Array],
        mask: jax.Array,
        cache: tuple[jax.Array, jax.Array] | None,
        cache_index: jax.Array | int,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        attn, cache = self.self_attn(self.input_layernorm(x), rope, mask, cache, cache_index)
        return self.finish(x, attn), cache

    def finish(self, x: jax.Array, attn: jax.Array) -> jax.Array:
        """The layer's output from its input and its attention block's output."""
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x))


class QwenModel(nnx.Module):
    """Embedding, decoder layers and the final norm (HF's ``model.*``)."""

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        self.embed_tokens = Embedding(config, rngs=rngs)
        self.layers = nnx.List([DecoderLayer(config, rngs=rngs) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size, config=config)


class Qwen(nnx.Module):
    """A Qwen causal LM: ``Qwen(config, rngs=nnx.Rngs(seed))`` initialises it randomly.

    Call it on int32 token ids of shape (batch, length) to get a :class:`QwenOutput`
    whose ``logits`` are fp32, (batch, length, vocab). See the module docstring for
    slots, masks and the cache.
    """

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.model = QwenModel(config, rngs=rngs)
        if not config.tie_embeddings:
            self.lm_head = Linear(
                config.hidden_size, config.vocab_size, bias=False, config=config, rngs=rngs
            )

    def __call__(
        self,
        tokens: jax.Array,
        valid: jax.Array | None = None,
        *,
        positions: jax.Array | None = None,
        cache: KVCache | None = None,
        cache_index: jax.Array | int = 0,
        cache_valid: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        return_hidden_states: bool = False,
        logits_at: jax.Array | None = None,
        head: bool = True,
    ) -> QwenOutput:
        """Runs the model.

        Args:
            tokens: (batch, length) int32 token ids.
            valid: (batch, length) bool, False for padding; default all True.
            positions: (batch, length) RoPE positions; default: the count of valid
                tokens before each one (so left padding does not shift positions).
            cache: per-layer (k, v) of shape (batch, kv_heads, slots, head_dim); the
                tokens' keys and values are written at ``cache_index``.
            cache_index: first cache slot of ``tokens``.
            cache_valid: (batch, slots) bool, which cache slots hold real tokens,
                including the ones written by this call. Required with a cache.
            attention_mask: (batch, length, length) bool, True where a query may see a
                key, instead of the causal mask over valid tokens (without a cache):
                e.g. several completions packed behind one shared prompt. It must be
                causal too: no query sees a later slot (attention skips those).
            return_hidden_states: also return the hidden states after the embedding and
                after each layer (the last one after the final norm), as HF does.
            logits_at: (batch, k) int positions: compute logits there only, shape
                (batch, k, vocab). A sampler's prefill needs the last position; a
                trainer needs the completion's. The LM head and the softmax over the
                vocabulary then cost nothing for the other positions.
            head: False skips the LM head and returns the final norm's output instead
                (``final_hidden``), for a caller that applies the head itself in pieces
                (:func:`rlax_core.models.logprobs.token_logprobs_and_entropy`).

        Returns:
            The logits; the updated cache when given one; the hidden states when asked
            for (the other fields are None).
        """
        c = self.config
        b, t = tokens.shape
        if valid is None:
            valid = jnp.ones((b, t), bool)
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0)
        if cache is None:
            key_valid = valid
            query_slots = jnp.arange(t)
        else:
            if cache_valid is None:
                raise ValueError("cache_valid is required with a cache")
            key_valid = cache_valid
            query_slots = cache_index + jnp.arange(t)
        key_slots = jnp.arange(key_valid.shape[1])
        if attention_mask is not None:
            mask = attention_mask
        else:
            mask = (key_slots[None, :] <= query_slots[:, None])[None] & key_valid[:, None, :]
        rope = rope_tables(positions, c.head_dim, c.rope_theta)

        x = self.model.embed_tokens(tokens)
        hidden = [x]
        new_cache: KVCache = []
        for i, layer in enumerate(self.model.layers):
            if cache is None and c.remat:
                # Training and scoring: recompute the layer in the backward pass. With a
                # cache (generation) there is no backward pass, so the decode loop never
                # traces remat.
                x = _rematerialised(layer, x, rope, mask)
            else:
                layer_cache = None if cache is None else cache[i]
                x, layer_cache = layer(x, rope, mask, layer_cache, cache_index)
                new_cache.append(layer_cache)
            hidden.append(x)
        x = self.model.norm(x)
        hidden[-1] = x
        if logits_at is not None:
            x = jnp.take_along_axis(x, logits_at[..., None], axis=1)
        return QwenOutput(
            logits=self.logits_from_hidden(x) if head else None,
            cache=None if cache is None else new_cache,
            hidden_states=hidden if return_hidden_states else None,
            final_hidden=None if head else x,
        )

    def head_weight(self) -> jax.Array:
        """The LM head's (vocab, hidden) weight: the embedding table when tied."""
        if self.config.tie_embeddings:
            return self.model.embed_tokens.weight[...]
        return self.lm_head.weight[...]

    def logits_from_hidden(self, x: jax.Array, weight: jax.Array | None = None) -> jax.Array:
        """Final-norm output (batch, length, hidden) → fp32 logits (batch, length, vocab).

        Args:
            weight: :meth:`head_weight`, when the caller already holds it.
        """
        weight = self.head_weight() if weight is None else weight
        return head_logits(x, weight, jnp.dtype(self.config.dtype))

    def init_cache(self, batch: int, slots: int) -> KVCache:
        """An empty KV cache for ``batch`` sequences of up to ``slots`` tokens."""
        c = self.config
        shape = (batch, c.num_kv_heads, slots, c.head_dim)
        dtype = jnp.dtype(c.dtype)
        return [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(c.num_layers)]


def head_logits(x: jax.Array, weight: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """The LM head's fp32 logits (..., vocab) of hidden states (..., hidden) and a
    (vocab, hidden) weight, products in ``dtype``: the sampler's and the trainer's one
    arithmetic."""
    # fp32 sums of the products, kept in fp32: rounding logits to bf16 would move every
    # log-probability by up to half a bf16 step of the logit (1/32 at 8).
    return jnp.einsum(
        "...h,vh->...v", x.astype(dtype), weight.astype(dtype), preferred_element_type=jnp.float32
    )


def _rematerialised(
    layer: DecoderLayer, x: jax.Array, rope: tuple[jax.Array, jax.Array], mask: jax.Array
) -> jax.Array:
    """``layer(x)`` without a cache, its activations recomputed in the backward pass.

    The forward pass keeps only the layer's inputs. The backward pass recomputes the
    layer once the gradient from the layer above has arrived: the recomputation reads
    that gradient. ``jax.checkpoint`` alone (or an optimization barrier, which XLA drops
    before its CPU scheduler runs) leaves the scheduler free to run every layer's
    recomputation early, and XLA's CPU scheduler does: all of them are then alive at
    once, as much memory as no remat at all (measured: 4.05 GiB against 4.24 without
    remat, 1.25 GiB with this, for six 0.5B layers on 2 × 1,088 tokens).

    A pure function of the layer's split state rather than ``nnx.remat``: NNX's lifted
    transform refuses a module whose parameters were made at another trace level.
    """
    graphdef, state = nnx.split(layer)
    return _remat_layer(graphdef, state, x, rope, mask)


def _apply_layer(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array, rope: tuple,
                 mask: jax.Array) -> jax.Array:  # fmt: skip
    return nnx.merge(graphdef, state)(x, rope, mask, None, 0)[0]


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _remat_layer(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array, rope: tuple,
                 mask: jax.Array) -> jax.Array:  # fmt: skip
    return _apply_layer(graphdef, state, x, rope, mask)


def _remat_forward(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array, rope: tuple,
                   mask: jax.Array) -> tuple[jax.Array, tuple]:  # fmt: skip
    return _apply_layer(graphdef, state, x, rope, mask), (state, x, rope, mask)


def _remat_backward(graphdef: nnx.GraphDef, inputs: tuple, grad: jax.Array) -> tuple:
    state, x, rope, mask = inputs
    # The recomputation reads the gradient: a data dependency that no compiler pass
    # removes (optimization barriers are dropped before XLA's CPU scheduler runs).
    x = x + (grad.reshape(-1)[0] * 0).astype(x.dtype)
    _, pullback = jax.vjp(lambda s, h, r: _apply_layer(graphdef, s, h, r, mask), state, x, rope)
    return (*pullback(grad), np.zeros(mask.shape, jax.dtypes.float0))


_remat_layer.defvjp(_remat_forward, _remat_backward)
