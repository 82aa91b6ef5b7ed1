"""The building blocks of the Qwen decoder: linear maps, RMSNorm, RoPE, attention, MLP.

Parameters keep Hugging Face's names and layouts (a linear weight is ``(out, in)``), so a
checkpoint maps onto the model name for name, with no transposes on load or save.

Numerics follow ``transformers``' Qwen2/Qwen3 code: RMSNorm and softmax in fp32, RoPE
tables in fp32, the normalised activations cast back before the norm weight multiplies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from rlax_core.models.qwen.config import QwenConfig
from rlax_core.models.qwen.decode_attention import attend_one_query
from rlax_core.models.qwen.sequence_attention import attend_causal


class Linear(nnx.Module):
    """``y = x W^T + b`` with ``W`` of shape (out, in), as in PyTorch.

    ``input_major``: ``W`` is held transposed, (in, out), the layout in which a product
    of few rows reads it fastest on a CPU (see
    :mod:`rlax_core.generate.paged.weights`); the arithmetic is the same.
    """

    def __init__(
        self, in_features: int, out_features: int, *, bias: bool, config: QwenConfig, rngs: nnx.Rngs
    ) -> None:
        std = in_features**-0.5
        self.weight = nnx.Param(
            (jax.random.normal(rngs.params(), (out_features, in_features)) * std).astype(
                config.param_dtype
            )
        )
        self.bias = nnx.Param(jnp.zeros((out_features,), config.param_dtype)) if bias else None
        self.dtype = config.dtype
        self.input_major = False

    def __call__(self, x: jax.Array) -> jax.Array:
        # Products of ``dtype`` operands summed in fp32, one rounding to ``dtype`` at the
        # end: a sampler's one-token step and a trainer's whole-sequence pass then differ
        # only in accumulation order, not in how often partial sums are rounded.
        y = jnp.einsum(
            "...i,io->...o" if self.input_major else "...i,oi->...o",
            x.astype(self.dtype),
            self.weight[...].astype(self.dtype),
            preferred_element_type=jnp.float32,
        )
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(self.dtype)


class Embedding(nnx.Module):
    """Token embedding table of shape (vocab, hidden)."""

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        shape = (config.vocab_size, config.hidden_size)
        self.weight = nnx.Param(
            (jax.random.normal(rngs.params(), shape) * 0.02).astype(config.param_dtype)
        )
        self.dtype = config.dtype

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return jnp.take(self.weight[...], tokens, axis=0).astype(self.dtype)


class RMSNorm(nnx.Module):
    """Root-mean-square norm over the last axis, computed in fp32."""

    def __init__(self, size: int, *, config: QwenConfig) -> None:
        self.weight = nnx.Param(jnp.ones((size,), config.param_dtype))
        self.eps = config.rms_norm_eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * normed.astype(x.dtype)


def rope_tables(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables of shape (batch, length, head_dim) for integer positions."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    angles = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates (batch, length, heads, head_dim) by the tables (HF's rotate_half form)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos[:, :, None, :].astype(x.dtype), sin[:, :, None, :].astype(x.dtype)
    return x * cos + rotated * sin


class Attention(nnx.Module):
    """Grouped-query self-attention with RoPE and an optional KV cache."""

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        h, d = config.hidden_size, config.head_dim
        self.config = config
        self.q_proj = Linear(
            h, config.num_heads * d, bias=config.qkv_bias, config=config, rngs=rngs
        )
        self.k_proj = Linear(
            h, config.num_kv_heads * d, bias=config.qkv_bias, config=config, rngs=rngs
        )
        self.v_proj = Linear(
            h, config.num_kv_heads * d, bias=config.qkv_bias, config=config, rngs=rngs
        )
        self.o_proj = Linear(config.num_heads * d, h, bias=False, config=config, rngs=rngs)
        if config.qk_norm:
            self.q_norm = RMSNorm(d, config=config)
            self.k_norm = RMSNorm(d, config=config)

    def __call__(
        self,
        x: jax.Array,
        rope: tuple[jax.Array, jax.Array],
        mask: jax.Array,
        cache: tuple[jax.Array, jax.Array] | None,
        cache_index: jax.Array | int,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """Attends ``x`` (batch, length, hidden) to itself or to the cache.

        Args:
            rope: cos/sin tables for the positions of ``x``.
            mask: (batch, length, keys) bool, True where a query may see a key; causal
                (no query sees a slot after its own).
            cache: (k, v) of shape (batch, kv_heads, slots, head_dim), or None.
            cache_index: the slot where ``x``'s keys and values are written.

        Returns:
            The output and the updated cache (None without one).
        """
        c = self.config
        t = x.shape[1]
        q, k, v = self.project(x, rope)
        # Heads first, (batch, kv_heads, slots, head_dim), as a cache holds them: a
        # decode step's products then run over the cache's own layout, with no per-step
        # transpose of the whole cache to put the batch axes of a product first.
        first_slot: int | None = 0  # the slot of the first query, when static
        if cache is None:
            k, v = _heads_first(k, k.dtype), _heads_first(v, v.dtype)
        else:
            k_cache, v_cache = cache
            start = (0, 0, cache_index, 0)
            k = jax.lax.dynamic_update_slice(k_cache, _heads_first(k, k_cache.dtype), start)
            v = jax.lax.dynamic_update_slice(v_cache, _heads_first(v, v_cache.dtype), start)
            cache = (k, v)
            first_slot = None
            if isinstance(cache_index, int):
                # A static start (a prefill): no query of this input may see a slot
                # past its own (causal), so attend to the slots up to the input's end,
                # not to a whole cache sized for the generation budget.
                end = cache_index + t
                k, v, mask = k[:, :, :end], v[:, :, :end], mask[..., :end]
                first_slot = cache_index
        k, v = k.astype(q.dtype), v.astype(q.dtype)
        scale = c.head_dim**-0.5
        if t == 1 and cache is not None:
            filled = cache_index + 1  # a decode step: the slots up to its own
            out = attend_one_query(q[:, 0], k, v, mask[:, 0], scale, filled)[:, None]
        else:
            out = attend_causal(q, k, v, mask, scale, first_slot)
        return self.output(out), cache

    def project(
        self, x: jax.Array, rope: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Queries, keys and values of ``x`` (batch, length, hidden), rotated.

        Returns:
            q of shape (batch, length, kv_heads, groups, head_dim) (the query heads that
            share a key head side by side), k and v of (batch, length, kv_heads, head_dim).
        """
        c = self.config
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, c.num_heads, c.head_dim)
        k = self.k_proj(x).reshape(b, t, c.num_kv_heads, c.head_dim)
        v = self.v_proj(x).reshape(b, t, c.num_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        groups = c.num_heads // c.num_kv_heads
        return q.reshape(b, t, c.num_kv_heads, groups, c.head_dim), k, v

    def output(self, attended: jax.Array) -> jax.Array:
        """The output projection of attended values (batch, length, kv_heads, groups, dim)."""
        b, t = attended.shape[:2]
        return self.o_proj(attended.reshape(b, t, -1))


def _heads_first(x: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """(batch, length, heads, head_dim) → the cache's (batch, heads, length, head_dim)."""
    return jnp.swapaxes(x, 1, 2).astype(dtype)


class MLP(nnx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: QwenConfig, *, rngs: nnx.Rngs) -> None:
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(h, i, bias=False, config=config, rngs=rngs)
        self.up_proj = Linear(h, i, bias=False, config=config, rngs=rngs)
        self.down_proj = Linear(i, h, bias=False, config=config, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))
