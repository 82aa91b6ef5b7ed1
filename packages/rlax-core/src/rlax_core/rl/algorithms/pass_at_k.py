"""Held-out evaluation metrics: pass@k with the unbiased estimator of Chen et al. (2021).

Sampling ``n ≥ k`` completions of a prompt, of which ``c`` are correct, estimates the
chance that at least one of ``k`` samples is correct as

    pass@k = 1 - C(n - c, k) / C(n, k)

which is unbiased, unlike ``1 - (1 - c/n)^k``. The binomials overflow floats for large
``n``; the ratio is computed as the product ``∏_{i=n-c+1}^{n} (1 - k/i)`` instead
(the form in the Codex paper), which stays within [0, 1] term by term.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate for one prompt: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: completions sampled for the prompt (n ≥ 1).
        c: how many of them were correct (0 ≤ c ≤ n).
        k: the number of attempts pass@k allows (1 ≤ k ≤ n).

    Raises:
        ValueError: the counts are out of range; in particular k > n.
    """
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"the correct count c={c} must lie in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 ≤ k ≤ n, but n={n} samples were drawn per prompt")
    if n - c < k:
        return 1.0  # every k-subset holds a correct sample
    ratio = 1.0
    for i in range(n - c + 1, n + 1):
        ratio *= 1.0 - k / i
    return 1.0 - ratio


def pass_at_k_metrics(correct: Sequence[int], n: int, ks: Sequence[int]) -> dict[str, float]:
    """Mean pass@1 and pass@k over prompts, as metrics named ``eval/pass@K``.

    Args:
        correct: per prompt, how many of its ``n`` completions were correct.
        n: completions sampled per prompt.
        ks: the k values to report besides 1; those above ``n`` cannot be estimated from
            ``n`` samples and are left out.

    Returns:
        ``{"eval/pass@1": ..., "eval/pass@K": ...}`` for 1 and each k in ``ks`` with k ≤ n,
        in increasing order of k.

    Raises:
        ValueError: no prompts, or a count out of range.
    """
    if not correct:
        raise ValueError("pass@k metrics need at least one prompt")
    return {
        f"eval/pass@{k}": sum(pass_at_k(n, c, k) for c in correct) / len(correct)
        for k in sorted({1, *(k for k in ks if k <= n)})
    }
