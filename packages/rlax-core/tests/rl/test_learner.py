"""The learner: micro-batching, sharding and the on-policy log-prob gap."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rlax_core.config.training_sections import AlgorithmSection, MeshSection, TrainerSection
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import MeshShape, QwenConfig, flat_params, init_model, replace_params
from rlax_core.rl.batch import TrainBatch, build_batch
from rlax_core.rl.learner import Learner
from rlax_core.types import Rollout, RolloutGroup

CONFIG = QwenConfig.tiny(vocab_size=128, tie_embeddings=False)


def _model():
    model = init_model(CONFIG, seed=0)
    # Sharper than the random init, so log-probabilities and gradients are not flat.
    return replace_params(model, {n: np.asarray(a) * 2 for n, a in flat_params(model).items()})


@pytest.fixture(scope="module")
def batch() -> TrainBatch:
    sampler = Sampler(_model())
    groups = []
    for g, prompt in enumerate([[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]]):
        out = sampler.generate(
            [prompt] * 4, SamplingParams(max_new_tokens=6), seed=[g * 4 + j for j in range(4)]
        )
        rollouts = tuple(
            Rollout(rollout_id=f"g{g}/{j}", completion_tokens=tuple(out.tokens[j]),
                    behaviour_logprobs=tuple(out.behaviour_logprobs[j]),
                    policy_logprobs=tuple(out.policy_logprobs[j]),
                    finish_reason=out.finish_reasons[j], reward=float((g + j) % 3 == 0))
            for j in range(4)
        )  # fmt: skip
        groups.append(RolloutGroup(group_id=f"g{g}", prompt_id=f"p{g}", prompt_tokens=tuple(prompt),
                                   policy_version=7, worker_id="w", rollouts=rollouts))  # fmt: skip
    return build_batch(groups, advantage="grpo")[0]


def _train(batch: TrainBatch, *, mesh=None, **trainer) -> tuple[Learner, dict]:
    # A huge Adam ε makes the update linear in the gradient, so comparisons are not
    # dominated by sign flips of near-zero gradient entries.
    settings = {"learning_rate": 100.0, "adam_eps": 1e3, "max_grad_norm": 1e9, **trainer}
    model = _model()
    if mesh is not None:
        from rlax_core.models import place_model

        model = place_model(model, mesh)
    learner = Learner(model, trainer=TrainerSection(**settings), algorithm=AlgorithmSection(),
                      temperature=1.0, max_new_tokens=6, mesh=mesh)  # fmt: skip
    return learner, learner.train_step(batch, version=7)


def _close(a: Learner, b: Learner, tolerance: float = 1e-3) -> None:
    """The two updates agree to ``tolerance`` relative to the largest step of a tensor.

    Float32 gradients summed in another order differ by ~1e-4 of a tensor's largest
    entry here (embedding gradients cancel heavily: advantages are zero-mean); a wrong
    normaliser or a dropped micro-batch would be off by tens of percent.
    """
    before = {n: np.asarray(v) for n, v in flat_params(_model()).items()}
    for name, value in flat_params(a.model).items():
        step_a = np.asarray(value) - before[name]
        step_b = np.asarray(flat_params(b.model)[name]) - before[name]
        scale = np.abs(step_a).max()
        assert scale > 0, f"{name} did not move"
        np.testing.assert_allclose(step_b, step_a, rtol=0, atol=tolerance * scale, err_msg=name)


def test_micro_batches_give_the_whole_batch_gradient(batch: TrainBatch) -> None:
    whole, whole_metrics = _train(batch)
    micro, micro_metrics = _train(batch, micro_batch_tokens=32)  # 2 sequences per micro-batch
    _close(whole, micro)
    for key in ("loss/total", "entropy/mean", "is_weight/mean", "grad_norm"):
        assert micro_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-5, abs=1e-5), key


def test_on_policy_rollouts_match_the_trainer(batch: TrainBatch) -> None:
    _, metrics = _train(batch)
    assert metrics["logprob_gap/trainer_max"] < 1e-5
    assert np.isnan(_train(batch)[0].train_step(batch, version=8)["logprob_gap/trainer_max"])


def test_sharded_training_equals_one_device(batch: TrainBatch) -> None:
    if len(jax.devices()) < 8:
        pytest.fail("needs 8 CPU devices (conftest.py sets XLA_FLAGS)")
    single, _ = _train(batch)
    mesh = MeshShape(data=2, fsdp=2, tensor=2).make()
    sharded, _ = _train(batch, mesh=mesh)
    assert flat_params(sharded.model)["model.layers.0.mlp.up_proj.weight"].sharding.mesh.size == 8
    _close(single, sharded)


def test_the_reference_kl_starts_at_zero(batch: TrainBatch) -> None:
    learner = Learner(_model(), trainer=TrainerSection(learning_rate=1e-3),
                      algorithm=AlgorithmSection(kl_coef=0.1), temperature=1.0, max_new_tokens=6,
                      reference=_model())  # fmt: skip
    assert learner.train_step(batch, version=7)["kl/mean"] == pytest.approx(0.0, abs=1e-6)
    assert learner.train_step(batch, version=8)["kl/mean"] > 1e-7  # the policy moved away
    assert set(learner.state()) == {"params", "opt_state", "reference"}


def test_several_updates_per_step_use_a_fixed_proximal_policy(batch: TrainBatch) -> None:
    learner = Learner(_model(), trainer=TrainerSection(minibatches_per_step=3, learning_rate=0.05),
                      algorithm=AlgorithmSection(), temperature=1.0, max_new_tokens=6)  # fmt: skip
    metrics = learner.train_step(batch, version=7)
    assert learner.updates == 3
    # π_prox is the policy before the first update, and here also the behaviour policy.
    assert metrics["is_weight/mean"] == pytest.approx(1.0, abs=1e-5)
    # Later mini-batches see π_θ / π_prox ≠ 1 after the first update: the clip engages.
    assert metrics["clip/fraction"] > 0


def test_the_mesh_section_is_a_mesh() -> None:
    assert MeshSection(data=2, tensor=4).data * MeshSection(data=2, tensor=4).tensor == 8
