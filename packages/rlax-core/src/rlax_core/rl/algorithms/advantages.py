"""Advantage estimators, registered by name: rewards of prompt groups → advantages.

An estimator is registered under its function's name (:data:`ADVANTAGES`), the name a
run config's ``algorithm.advantage`` takes; the config's allowed values are read from
here. Every estimator takes rewards of shape (groups, samples) — the completions of one prompt
in a row — and a boolean mask of the same shape (False for samples without a reward,
e.g. a sandbox error), and returns advantages of that shape (0 where masked). They run
on the host in NumPy: a batch's rewards are a few thousand numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

EPS = 1e-6

AdvantageEstimator = Callable[[np.ndarray, np.ndarray], np.ndarray]

ADVANTAGES: dict[str, AdvantageEstimator] = {}
"""Every estimator, by name."""

GROUP_ADVANTAGES: set[str] = set()
"""The estimators that compare the completions of one prompt (they need ≥ 2 of them)."""


def _register(*, compares_group: bool) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    def add(estimator: AdvantageEstimator) -> AdvantageEstimator:
        ADVANTAGES[estimator.__name__] = estimator
        if compares_group:
            GROUP_ADVANTAGES.add(estimator.__name__)
        return estimator

    return add


def _masked(rewards: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    rewards = np.asarray(rewards, np.float64)
    mask = np.ones(rewards.shape, bool) if mask is None else np.asarray(mask, bool)
    return np.where(mask, rewards, 0.0), mask


@_register(compares_group=True)
def grpo(rewards: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """GRPO: ``A_i = (r_i − mean(r)) / (std(r) + ε)`` within each group.

    ``std`` is the sample standard deviation (``ddof = 1``, as verl computes it); a group
    whose rewards are all equal gets advantages 0.
    """
    r, m = _masked(rewards, mask)
    n = m.sum(axis=1, keepdims=True)
    mean = r.sum(axis=1, keepdims=True) / np.maximum(n, 1)
    var = (np.where(m, r - mean, 0.0) ** 2).sum(axis=1, keepdims=True) / np.maximum(n - 1, 1)
    return np.where(m, (r - mean) / (np.sqrt(var) + EPS), 0.0)


@_register(compares_group=True)
def dr_grpo(rewards: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Dr. GRPO: ``A_i = r_i − mean(r)`` within each group (no division by the std).

    Dr. GRPO's other half — no per-sequence length normalisation — is the loss's
    ``fixed_length`` aggregation.
    """
    r, m = _masked(rewards, mask)
    mean = r.sum(axis=1, keepdims=True) / np.maximum(m.sum(axis=1, keepdims=True), 1)
    return np.where(m, r - mean, 0.0)


@_register(compares_group=True)
def rloo(rewards: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """RLOO: ``A_i = r_i − mean_{j≠i} r_j`` (leave-one-out baseline within each group).

    A group with a single sample has no baseline: its advantage is 0.
    """
    r, m = _masked(rewards, mask)
    n = m.sum(axis=1, keepdims=True)
    others = (r.sum(axis=1, keepdims=True) - r) / np.maximum(n - 1, 1)
    return np.where(m & (n > 1), r - others, 0.0)


@_register(compares_group=False)
def reinforce(rewards: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """REINFORCE with a baseline: ``A_i = r_i − b``, ``b`` the mean reward of the batch."""
    r, m = _masked(rewards, mask)
    baseline = r.sum() / max(int(m.sum()), 1)
    return np.where(m, r - baseline, 0.0)
