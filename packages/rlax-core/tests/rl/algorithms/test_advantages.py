"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import numpy as np

from rlax_core.rl.algorithms.advantages import ADVANTAGES, dr_grpo, grpo, reinforce, rloo

REWARDS = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 1.0, 0.5]])


def test_grpo_by_hand() -> None:
    # Group 0: mean 0.5, sample std sqrt(1/3) = 0.57735 → ±0.866025.
    # Group 1: all equal → 0. Group 2: mean 0.5, std sqrt(1/6) = 0.408248 → -1.2247, 0, 1.2247, 0.
    expected = np.array(
        [[0.866025, -0.866025, -0.866025, 0.866025], [0, 0, 0, 0], [-1.224745, 0, 1.224745, 0]]
    )
    np.testing.assert_allclose(grpo(REWARDS), expected, atol=1e-5)


def test_dr_grpo_only_centres() -> None:
    expected = np.array([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.5, 0, 0.5, 0]])
    np.testing.assert_allclose(dr_grpo(REWARDS), expected)


def test_rloo_leaves_one_out() -> None:
    # Group 0, sample 0: others (0, 0, 1) mean 1/3 → 1 - 1/3.
    expected = np.array([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0, 0, 0, 0], [-2 / 3, 0, 2 / 3, 0]])
    np.testing.assert_allclose(rloo(REWARDS), expected, atol=1e-12)
    # RLOO is the centred reward scaled by K / (K - 1).
    np.testing.assert_allclose(rloo(REWARDS), dr_grpo(REWARDS) * 4 / 3, atol=1e-12)


def test_reinforce_uses_the_batch_mean() -> None:
    # The batch's rewards sum to 2 + 4 + 2 = 8 over 12 samples: baseline 2/3.
    np.testing.assert_allclose(reinforce(REWARDS), REWARDS - 2 / 3)


def test_masked_samples_get_zero_and_do_not_count() -> None:
    mask = np.array([[True, True, False, True]] * 3)
    # Group 0 without sample 2: rewards (1, 0, 1), mean 2/3.
    centred = dr_grpo(REWARDS, mask)
    np.testing.assert_allclose(centred[0], [1 / 3, -2 / 3, 0.0, 1 / 3], atol=1e-12)
    for name, estimator in ADVANTAGES.items():
        assert (estimator(REWARDS, mask)[:, 2] == 0).all(), name
    # RLOO with one valid sample has no baseline.
    single = np.array([[True, False, False, False]])
    assert rloo(np.array([[1.0, 0, 0, 0]]), single)[0, 0] == 0.0


def test_every_estimator_is_registered_and_in_the_config() -> None:
    from typing import get_args

    from rlax_core.config.sections import AlgorithmSection

    allowed = set(get_args(AlgorithmSection.model_fields["advantage"].annotation))
    assert allowed == set(ADVANTAGES)
