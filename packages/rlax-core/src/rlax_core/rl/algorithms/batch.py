"""From rollout groups to the padded arrays one training step consumes.

Sequences are prompt + completion, right-padded to a bucketed length
(:mod:`rlax_core.generate.buckets`: a run compiles its train step a bounded number of
times, and padding wastes at most a quarter). Per-token arrays are aligned with
the *targets* ``tokens[:, 1:]``: entry ``t`` is about the token at position ``t + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlax_core.generate.buckets import bucket_length
from rlax_core.rl.algorithms.advantages import ADVANTAGES
from rlax_core.types.rollout import RolloutGroup


@dataclass(frozen=True)
class TrainBatch:
    """One step's sequences, ready for the learner.

    Attributes:
        tokens: (N, L) int32, prompt then completion, right-padded with 0.
        valid: (N, L) bool, False on padding.
        loss_mask: (N, L − 1) bool, True on completion targets that count in the loss
            (the model's tokens of a judged rollout; an environment's never count).
        behaviour_logprobs: (N, L − 1) log μ of each completion target.
        sampler_logprobs: (N, L − 1) the sampler's untruncated policy log-probabilities
            (NaN where the rollout did not report them).
        advantages: (N,) float32.
        rewards: (N,) float32 (NaN for a sample without a reward).
        versions: (N,) int64, the policy version that produced each sequence.
        group_ids: the rollout groups, in order.
        groups: (N,) int32, each sequence's index in ``group_ids`` (groups are
            consecutive rows).
        prompt_lengths: (N,) int32, the prompt's tokens at the start of each sequence.
    """

    tokens: np.ndarray
    valid: np.ndarray
    loss_mask: np.ndarray
    behaviour_logprobs: np.ndarray
    sampler_logprobs: np.ndarray
    advantages: np.ndarray
    rewards: np.ndarray
    versions: np.ndarray
    group_ids: tuple[str, ...]
    groups: np.ndarray
    prompt_lengths: np.ndarray

    @property
    def num_sequences(self) -> int:
        """N."""
        return int(self.tokens.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        """Completion tokens that count in the loss."""
        return int(self.loss_mask.sum())


def has_signal(group: RolloutGroup) -> bool:
    """Whether a group's rewards differ (a group of equal rewards teaches nothing)."""
    rewards = {r.reward for r in group.rollouts if r.reward is not None}
    return len(rewards) > 1


def loss_positions(loss_mask: np.ndarray, max_new_tokens: int) -> np.ndarray:
    """Per row, the target indices of a window that holds every target in the loss.

    The trainer computes logits at these positions only: the prompt's positions predict
    nothing that is trained, and the LM head and the softmax over the vocabulary are a
    large part of a step (and of its memory) for a big vocabulary or a short completion.

    Args:
        loss_mask: (N, L − 1) bool, as in :class:`TrainBatch`.
        max_new_tokens: the completion limit; the width never exceeds it unless a row's
            counted targets are wider.

    Returns:
        (N, W) int32, ascending and distinct in each row, within [0, L − 1). W is the
        widest row's span, bucketed (bounded compilations) and capped as above.
    """
    targets = loss_mask.shape[1]
    counted = loss_mask.any(axis=1)
    first = np.where(counted, loss_mask.argmax(axis=1), 0)
    last = np.where(counted, targets - 1 - loss_mask[:, ::-1].argmax(axis=1), 0)
    widest = int((last - first + 1)[counted].max(initial=1))
    width = min(max(widest, min(bucket_length(widest), max_new_tokens)), targets)
    start = np.minimum(first, targets - width)
    return (start[:, None] + np.arange(width)[None, :]).astype(np.int32)


def padded_length(length: int) -> int:
    """The length a sequence of ``length`` tokens is padded to."""
    return bucket_length(length)


def build_batch(
    groups: Sequence[RolloutGroup], *, advantage: str, overlong_filter: bool = False
) -> tuple[TrainBatch, dict[str, float]]:
    """Pads the groups' sequences and computes their advantages.

    Args:
        groups: the step's rollout groups (each with the same number of samples).
        advantage: name of an estimator in :data:`rlax_core.rl.algorithms.advantages.ADVANTAGES`.
        overlong_filter: leave completions that hit the token limit out of the loss.

    Returns:
        The batch and host-side metrics (rewards, lengths, samples without reward).
    """
    rollouts = [(g, r) for g in groups for r in g.rollouts]
    samples = max(len(g.rollouts) for g in groups)
    rewards = np.full((len(groups), samples), np.nan)
    for i, group in enumerate(groups):
        for j, rollout in enumerate(group.rollouts):
            if rollout.reward is not None:
                rewards[i, j] = rollout.reward
    has_reward = ~np.isnan(rewards)
    advantages = ADVANTAGES[advantage](np.nan_to_num(rewards), has_reward)
    length = padded_length(
        max(len(g.prompt_tokens) + len(r.completion_tokens) for g, r in rollouts)
    )
    n = len(rollouts)
    tokens = np.zeros((n, length), np.int32)
    valid = np.zeros((n, length), bool)
    loss_mask = np.zeros((n, length - 1), bool)
    behaviour = np.zeros((n, length - 1), np.float32)
    sampler = np.full((n, length - 1), np.nan, np.float32)
    flat_adv = np.zeros(n, np.float32)
    flat_rewards = np.full(n, np.nan, np.float32)
    versions = np.zeros(n, np.int64)
    group_of = np.zeros(n, np.int32)
    prompt_lengths = np.zeros(n, np.int32)
    row = 0
    for i, group in enumerate(groups):
        p = len(group.prompt_tokens)
        for j, rollout in enumerate(group.rollouts):
            c = len(rollout.completion_tokens)
            tokens[row, :p] = group.prompt_tokens
            tokens[row, p : p + c] = rollout.completion_tokens
            valid[row, : p + c] = True
            counts = has_reward[i, j] and not (
                overlong_filter and rollout.finish_reason == "length"
            )
            loss_mask[row, p - 1 : p - 1 + c] = counts
            behaviour[row, p - 1 : p - 1 + c] = rollout.behaviour_logprobs
            if rollout.policy_logprobs is not None:
                sampler[row, p - 1 : p - 1 + c] = rollout.policy_logprobs
            for start, stop in rollout.environment_spans:  # never sampled: never trained
                loss_mask[row, p - 1 + start : p - 1 + stop] = False
                sampler[row, p - 1 + start : p - 1 + stop] = np.nan
            flat_adv[row] = advantages[i, j]
            flat_rewards[row] = rewards[i, j]
            versions[row] = group.policy_version
            group_of[row] = i
            prompt_lengths[row] = p
            row += 1
    batch = TrainBatch(
        tokens=tokens,
        valid=valid,
        loss_mask=loss_mask,
        behaviour_logprobs=behaviour,
        sampler_logprobs=sampler,
        advantages=flat_adv,
        rewards=flat_rewards,
        versions=versions,
        group_ids=tuple(g.group_id for g in groups),
        groups=group_of,
        prompt_lengths=prompt_lengths,
    )
    lengths = [len(r.completion_tokens) for _, r in rollouts]
    metrics = {
        "reward/mean": float(np.nanmean(rewards)) if has_reward.any() else float("nan"),
        "reward/std": float(np.nanstd(rewards)) if has_reward.any() else float("nan"),
        "completion/length_mean": float(np.mean(lengths)),
        "completion/length_max": float(max(lengths)),
        # Model turns per rollout: one, and one more after each environment reply.
        "completion/turns_mean": float(
            np.mean([1 + len(r.environment_spans) for _, r in rollouts])
        ),
        "completion/truncated_fraction": float(
            np.mean([r.finish_reason == "length" for _, r in rollouts])
        ),
        # Sampled partly by a newer policy (in-flight weight updates).
        "completion/mixed_version_fraction": float(
            np.mean([r.token_versions is not None for _, r in rollouts])
        ),
        "verdict/no_reward": float((~has_reward).sum()),
        "batch/sequences": float(n),
        "batch/loss_tokens": float(loss_mask.sum()),
        "batch/padded_length": float(length),
    }
    worker_gaps = [g.logprob_gap for g in groups if g.logprob_gap is not None]
    if worker_gaps:  # checked by the workers on every batch they sample
        metrics["logprob_gap/max"] = float(max(worker_gaps))
    return batch, metrics
