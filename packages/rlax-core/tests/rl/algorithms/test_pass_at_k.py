"""pass@k: the unbiased estimator against the binomial formula and hand-computed values."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from rlax_core.rl.algorithms.pass_at_k import pass_at_k, pass_at_k_metrics


def _reference(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k), exactly, with math.comb (0 when n - c < k)."""
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


TABLE = [
    (n, c, k)
    for n in (1, 2, 5, 8, 16, 100)
    for c in sorted({0, 1, n // 3, n // 2, n - 1, n})
    for k in sorted({1, 2, n // 2, n - 1, n})
    if 1 <= k <= n and 0 <= c <= n
]


@pytest.mark.parametrize(("n", "c", "k"), TABLE)
def test_matches_the_binomial_formula(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(_reference(n, c, k), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # pass@1 is the fraction correct
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (5, 2, 4, 1.0),  # only 3 wrong samples: any 4 include a correct one
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (10, 1, 10, 1.0),
        (10, 1, 5, 0.5),  # the one correct sample is in half of the 5-subsets
    ],
)
def test_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_large_counts_stay_finite_and_exact() -> None:
    # C(2000, 100) is about 1e189 and C(10000, 5000) overflows a float: the product form
    # never builds either.
    assert pass_at_k(2000, 3, 100) == pytest.approx(_reference(2000, 3, 100), rel=1e-12)
    assert pass_at_k(10_000, 1, 5_000) == pytest.approx(0.5, rel=1e-12)
    assert 0.0 <= pass_at_k(10_000, 9_000, 2) <= 1.0


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (4, 1, 5, "needs 1 ≤ k ≤ n"),
        (4, 1, 0, "needs 1 ≤ k ≤ n"),
        (4, 5, 1, "must lie in"),
        (4, -1, 1, "must lie in"),
        (0, 0, 1, "at least one sample"),
    ],
)
def test_out_of_range_counts_are_refused(n: int, c: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


def test_metrics_average_over_prompts() -> None:
    correct = [0, 2, 5]
    metrics = pass_at_k_metrics(correct, n=5, ks=[4, 2, 8])
    assert list(metrics) == ["eval/pass@1", "eval/pass@2", "eval/pass@4"]  # 8 > n: left out
    assert metrics["eval/pass@1"] == pytest.approx((0 + 0.4 + 1) / 3)
    assert metrics["eval/pass@2"] == pytest.approx((0 + 0.7 + 1) / 3)
    assert metrics["eval/pass@4"] == pytest.approx((0 + 1 + 1) / 3)
    assert pass_at_k_metrics([3], n=4, ks=[]) == {"eval/pass@1": 0.75}


def test_metrics_need_prompts_and_valid_counts() -> None:
    with pytest.raises(ValueError, match="at least one prompt"):
        pass_at_k_metrics([], n=4, ks=[2])
    with pytest.raises(ValueError, match="must lie in"):
        pass_at_k_metrics([1, 5], n=4, ks=[2])
