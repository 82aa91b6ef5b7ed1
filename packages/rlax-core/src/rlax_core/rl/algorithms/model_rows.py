"""How a training batch's sequences become the rows the model runs on.

The plain layout is a row per sequence. In the shared-prompt layout a rollout group is
one row: its prompt once, then every sample's completion. Each completion attends to
the prompt and to itself, never to its siblings, and restarts its positions where the
prompt ends, so each completion token gets exactly the logits it gets in its own row;
only the prompt's forward and backward pass are done once instead of once per sample.
GRPO-style groups (many samples of one prompt) with prompts that are long next to the
completions gain the most. :func:`choose_rows` takes it when its estimated FLOPs are
fewer (its attention is quadratic in the longer row, so long completions lose).

Either way the model returns logits at ``logits_at`` for ``targets``, ``per_row``
sequences' loss windows per row, in the batch's sequence order: reshaped, they line up
with the per-sequence arrays of the loss window
(:func:`~rlax_core.rl.algorithms.batch.loss_positions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from rlax_core.generate.buckets import bucket_length
from rlax_core.models.qwen import QwenConfig
from rlax_core.rl.algorithms.batch import TrainBatch


@dataclass(frozen=True)
class ModelRows:
    """The model's inputs for a batch.

    Attributes:
        tokens: (R, T) int32.
        valid: (R, T) bool, False on padding.
        rope: (R, T) int32 RoPE positions in the shared-prompt layout; None in the plain
            layout (the model's default: the count of valid tokens before each one).
        segments: (R, T) int32 in the shared-prompt layout: 0 on the prompt, j + 1 on
            sample j's completion, −1 on padding; None in the plain layout (causal mask).
        logits_at: (R, per_row · W) positions where logits are computed.
        targets: (R, per_row · W) the token each of those logits is scored on.
        per_row: sequences per row (1 in the plain layout).
    """

    tokens: np.ndarray
    valid: np.ndarray
    rope: np.ndarray | None
    segments: np.ndarray | None
    logits_at: np.ndarray
    targets: np.ndarray
    per_row: int

    @property
    def count(self) -> int:
        """R."""
        return int(self.tokens.shape[0])

    def sequences(self, rows: np.ndarray) -> np.ndarray:
        """The batch rows (sequences) held by model rows ``rows``, in order."""
        return (rows[:, None] * self.per_row + np.arange(self.per_row)[None, :]).reshape(-1)

    def flops(self, config: QwenConfig) -> float:
        """Estimated multiply-adds of the decoder layers' forward pass over all rows."""
        c = config
        q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        per_token = c.hidden_size * (2 * q + 2 * kv) + 3 * c.hidden_size * c.intermediate_size
        per_key = 2 * q  # scores and the weighted sum of values
        rows, length = self.tokens.shape
        return float(c.num_layers * rows * length * (per_token + length * per_key))


def plain_rows(batch: TrainBatch, positions: np.ndarray) -> ModelRows:
    """A row per sequence; logits at the loss window ``positions`` (N, W)."""
    return ModelRows(
        tokens=batch.tokens,
        valid=batch.valid,
        rope=None,
        segments=None,
        logits_at=positions,
        targets=np.take_along_axis(batch.tokens, positions + 1, axis=1),
        per_row=1,
    )


def shared_prompt_rows(batch: TrainBatch, positions: np.ndarray) -> ModelRows | None:
    """A row per rollout group (see the module docstring); None unless every group has the
    same number of samples, two or more, in consecutive batch rows."""
    groups = batch.groups
    sizes = np.bincount(groups)
    n = int(sizes[0]) if len(sizes) else 0
    if n < 2 or (sizes != n).any() or (np.diff(groups) < 0).any():
        return None
    count, width = len(sizes), positions.shape[1]
    prompt = batch.prompt_lengths
    completion = batch.valid.sum(axis=1) - prompt
    length = bucket_length(int((prompt[::n] + completion.reshape(count, n).sum(axis=1)).max()))
    tokens = np.zeros((count, length), np.int32)
    rope = np.zeros((count, length), np.int32)
    segments = np.full((count, length), -1, np.int32)
    logits_at = np.zeros((count, n * width), np.int32)
    for g in range(count):
        first = g * n
        p = int(prompt[first])
        tokens[g, :p] = batch.tokens[first, :p]
        rope[g, :p] = np.arange(p)
        segments[g, :p] = 0
        start = p
        for j in range(n):
            row, c = first + j, int(completion[first + j])
            end = start + c
            tokens[g, start:end] = batch.tokens[row, p : p + c]
            rope[g, start:end] = np.arange(p, p + c)
            segments[g, start:end] = j + 1
            # Target t of the plain row is completion token i = t − (p − 1): scored on the
            # prompt's last logits (i = 0) or on the completion's token i − 1. Targets
            # outside the completion are masked out of the loss; any position does.
            i = positions[row] - (p - 1)
            at = np.where(i <= 0, p - 1, np.where(i < c, start + i - 1, max(end - 1, p - 1)))
            logits_at[g, j * width : (j + 1) * width] = at
            start = end
    targets = np.take_along_axis(batch.tokens, positions + 1, axis=1)
    return ModelRows(
        tokens=tokens,
        valid=segments >= 0,
        rope=rope,
        segments=segments,
        logits_at=logits_at,
        targets=targets.reshape(count, n * width),
        per_row=n,
    )


def choose_rows(
    batch: TrainBatch, positions: np.ndarray, config: QwenConfig, *, share_prompts: bool
) -> ModelRows:
    """The shared-prompt layout if allowed, possible and cheaper in FLOPs; else plain."""
    plain = plain_rows(batch, positions)
    shared = shared_prompt_rows(batch, positions) if share_prompts else None
    if shared is not None and shared.flops(config) < plain.flops(config):
        return shared
    return plain


def shared_prompt_mask(segments: jax.Array) -> jax.Array:
    """(R, T, T) True where a query may see a key: earlier tokens of the prompt
    (segment 0) or of its own segment; padding (−1) is never seen."""
    length = segments.shape[1]
    causal = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]
    query, key = segments[:, :, None], segments[:, None, :]
    return causal[None] & (key >= 0) & ((key == 0) | (key == query))


__all__ = [
    "ModelRows",
    "choose_rows",
    "plain_rows",
    "shared_prompt_mask",
    "shared_prompt_rows",
]
