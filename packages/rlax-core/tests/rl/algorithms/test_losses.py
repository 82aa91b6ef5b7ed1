"""Policy losses, aggregation and KL against NumPy references written term by term."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.rl.algorithms.losses import (
    POLICY_LOSSES,
    LossConfig,
    aggregate,
    kl_estimate,
    policy_objective,
)

rng = np.random.default_rng(0)
N, T = 3, 5
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
LOGP = rng.normal(-1.0, 0.3, (N, T))
PROX = LOGP + rng.normal(0.0, 0.2, (N, T))
BEHAV = PROX + rng.normal(0.0, 0.5, (N, T))
ADV = np.array([1.5, -0.7, 0.3])
CFG = LossConfig(clip_low=0.2, clip_high=0.28, importance_ratio_cap=1.5, max_new_tokens=T)


def _numpy_aggregate(values: np.ndarray, mode: str) -> float:
    if mode == "token":
        return sum(values[i, t] for i in range(N) for t in range(T) if MASK[i, t]) / MASK.sum()
    if mode == "sequence":
        return np.mean([values[i][MASK[i]].mean() for i in range(N)])
    return sum(values[i, t] for i in range(N) for t in range(T) if MASK[i, t]) / (N * T)


def _numpy_ppo(i: int, t: int) -> float:
    ratio = np.exp(LOGP[i, t] - PROX[i, t])
    weight = min(np.exp(PROX[i, t] - BEHAV[i, t]), CFG.importance_ratio_cap)
    clipped = np.clip(ratio, 1 - CFG.clip_low, 1 + CFG.clip_high)
    return -weight * min(ratio * ADV[i], clipped * ADV[i])


def _numpy_gspo(i: int, t: int) -> float:
    valid = MASK[i]
    s = np.exp(np.mean(LOGP[i][valid] - PROX[i][valid]))
    weight = min(np.exp(np.mean(PROX[i][valid] - BEHAV[i][valid])), CFG.importance_ratio_cap)
    return -weight * min(s * ADV[i], np.clip(s, 1 - CFG.clip_low, 1 + CFG.clip_high) * ADV[i])


def _numpy_reinforce(i: int, t: int) -> float:
    weight = min(np.exp(PROX[i, t] - BEHAV[i, t]), CFG.importance_ratio_cap)
    return -weight * ADV[i] * LOGP[i, t]


REFERENCES = {"ppo_clip": _numpy_ppo, "gspo": _numpy_gspo, "reinforce": _numpy_reinforce}


@pytest.mark.parametrize("mode", ["token", "sequence", "fixed_length"])
@pytest.mark.parametrize("loss", sorted(POLICY_LOSSES))
def test_loss_matches_numpy(loss: str, mode: str) -> None:
    cfg = LossConfig(**{**CFG.__dict__, "loss": loss, "aggregation": mode})
    expected = _numpy_aggregate(
        np.array([[REFERENCES[loss](i, t) for t in range(T)] for i in range(N)]), mode
    )
    total, metrics = policy_objective(
        jnp.asarray(LOGP),
        jnp.asarray(PROX),
        jnp.asarray(BEHAV),
        jnp.asarray(ADV),
        jnp.asarray(MASK),
        cfg,
    )
    assert float(total) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["loss/policy"]) == pytest.approx(expected, rel=1e-5)


def test_ppo_gradient_on_policy_is_the_weighted_policy_gradient() -> None:
    """At π_θ = π_prox the clip is inactive: ∂ℓ/∂logp = −w·A / (number of tokens)."""

    def loss(logp: jax.Array) -> jax.Array:
        return policy_objective(
            logp, jnp.asarray(PROX), jnp.asarray(BEHAV), jnp.asarray(ADV), jnp.asarray(MASK), CFG
        )[0]

    grad = np.asarray(jax.grad(loss)(jnp.asarray(PROX)))
    weights = np.minimum(np.exp(PROX - BEHAV), CFG.importance_ratio_cap)
    expected = np.where(MASK, -weights * ADV[:, None] / MASK.sum(), 0.0)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)


def test_clipping_is_asymmetric_and_counted() -> None:
    prox = np.zeros((2, 1))
    logp = np.log(np.array([[1.25], [1.25]]))  # ratio 1.25: inside 1.28, outside 1.2
    mask = np.ones((2, 1), bool)
    for adv, clipped_fraction in ((np.array([1.0, 1.0]), 0.0), (np.array([-1.0, -1.0]), 0.0)):
        _, m = policy_objective(
            jnp.asarray(logp),
            jnp.asarray(prox),
            jnp.asarray(prox),
            jnp.asarray(adv),
            jnp.asarray(mask),
            CFG,
        )
        assert float(m["clip/fraction"]) == clipped_fraction
    logp = np.log(np.array([[1.3], [0.7]]))  # above 1.28 with A > 0; below 0.8 with A < 0
    _, m = policy_objective(
        jnp.asarray(logp),
        jnp.asarray(prox),
        jnp.asarray(prox),
        jnp.asarray(np.array([1.0, -1.0])),
        jnp.asarray(mask),
        CFG,
    )
    assert float(m["clip/fraction"]) == 1.0


def test_stale_tokens_are_reweighted_and_truncated() -> None:
    prox = np.zeros((1, 3))
    behav = np.log(np.array([[1.0, 0.5, 0.1]]))  # π_prox / μ = 1, 2, 10
    _, m = policy_objective(
        jnp.asarray(prox),
        jnp.asarray(prox),
        jnp.asarray(behav),
        jnp.asarray([1.0]),
        jnp.ones((1, 3), bool),
        CFG,
    )
    assert float(m["is_weight/max"]) == pytest.approx(1.5)  # capped
    assert float(m["is_weight/mean"]) == pytest.approx((1 + 1.5 + 1.5) / 3)
    assert float(m["is_weight/truncated_fraction"]) == pytest.approx(2 / 3)


def test_kl_estimators_by_hand() -> None:
    logp, ref = jnp.asarray([-1.0, -2.0]), jnp.asarray([-1.5, -1.0])
    np.testing.assert_allclose(kl_estimate(logp, ref, "k1"), [0.5, -1.0])
    np.testing.assert_allclose(
        kl_estimate(logp, ref, "k3"), [np.exp(-0.5) + 0.5 - 1, np.exp(1.0) - 1 - 1], rtol=1e-6
    )
    with pytest.raises(ValueError, match="k2"):
        kl_estimate(logp, ref, "k2")


def test_kl_and_entropy_terms_enter_the_total() -> None:
    cfg = LossConfig(**{**CFG.__dict__, "kl_coef": 0.1, "entropy_coef": 0.01})
    ref = jnp.asarray(LOGP - 0.3)
    entropy = jnp.full((N, T), 2.0)
    args = (
        jnp.asarray(LOGP),
        jnp.asarray(PROX),
        jnp.asarray(BEHAV),
        jnp.asarray(ADV),
        jnp.asarray(MASK),
    )
    total, m = policy_objective(*args, cfg, ref=ref, entropy=entropy)
    k3 = np.exp(-0.3) + 0.3 - 1
    assert float(m["kl/mean"]) == pytest.approx(k3, rel=1e-5)
    assert float(total) == pytest.approx(float(m["loss/policy"]) + 0.1 * k3 - 0.01 * 2.0, rel=1e-5)


def test_aggregation_modes_by_hand() -> None:
    values = jnp.asarray(np.arange(N * T, dtype=np.float64).reshape(N, T))
    for mode in ("token", "sequence", "fixed_length"):
        assert float(aggregate(values, jnp.asarray(MASK), mode, T)) == pytest.approx(
            _numpy_aggregate(np.asarray(values), mode)
        )
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(values, jnp.asarray(MASK), "mean")
