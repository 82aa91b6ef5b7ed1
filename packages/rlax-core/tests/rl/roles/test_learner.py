"""The learner: micro-batching, sharding and the on-policy log-prob gap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlax_core.config.sections import AlgorithmSection, MeshSection, TrainerSection
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.models import MeshShape, QwenConfig, flat_params, init_model, replace_params
from rlax_core.models.logprobs import teacher_forced_logprobs
from rlax_core.models.params import params_by_name
from rlax_core.rl.algorithms.batch import TrainBatch, build_batch, loss_positions
from rlax_core.rl.algorithms.model_rows import choose_rows
from rlax_core.rl.roles.learner import Learner
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


class _EveryPositionLearner(Learner):
    """The reference: a row per sequence, logits at every position, as a plain
    teacher-forced pass has them."""

    def _policy(self, params, arrays, *, entropy_gradient=False, unrolled=False):
        assert "segments" not in arrays, "train the reference with share_prompts=False"
        model = nnx.merge(self.graphdef, params)
        logits = model(arrays["tokens"], arrays["valid"]).logits[:, :-1]
        log_probs = jax.nn.log_softmax(logits / self.temperature, axis=-1)
        window = arrays["logits_at"]
        logp = teacher_forced_logprobs(model, arrays["tokens"], arrays["valid"], self.temperature)
        log_probs = jnp.take_along_axis(log_probs, window[..., None], axis=1)
        if not entropy_gradient:
            log_probs = jax.lax.stop_gradient(log_probs)
        entropy = -(jnp.exp(log_probs) * log_probs).sum(axis=-1)
        return jnp.take_along_axis(logp, window, axis=1), entropy


def _train(batch: TrainBatch, *, mesh=None, learner=Learner, algorithm=None, **trainer):
    # A huge Adam ε makes the update linear in the gradient, so comparisons are not
    # dominated by sign flips of near-zero gradient entries.
    settings = {"learning_rate": 100.0, "adam_eps": 1e3, "max_grad_norm": 1e9, **trainer}
    model = _model()
    if mesh is not None:
        from rlax_core.models import place_model

        model = place_model(model, mesh)
    learner = learner(model, trainer=TrainerSection(**settings),
                      algorithm=algorithm or AlgorithmSection(), temperature=1.0, max_new_tokens=6,
                      mesh=mesh)  # fmt: skip
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


def test_the_loss_window_holds_every_counted_target() -> None:
    mask = np.zeros((4, 12), bool)
    mask[0, 2:5] = True  # 3 targets
    mask[1, 9:12] = True  # at the end: the window must not run past it
    mask[2, [3, 6]] = True  # a hole inside the span
    positions = loss_positions(mask, max_new_tokens=6)
    assert positions.shape == (4, 6)  # the widest span (4) bucketed, capped at max_new_tokens
    for row in range(4):
        assert (np.diff(positions[row]) == 1).all() and positions[row, 0] >= 0
        assert positions[row, -1] < 12 and set(np.flatnonzero(mask[row])) <= set(positions[row])
    assert loss_positions(mask[:, :5], max_new_tokens=6).shape == (4, 5)  # at most L − 1
    assert loss_positions(np.zeros((2, 8), bool), max_new_tokens=4).shape == (2, 4)


@pytest.mark.parametrize("entropy_coef", [0.0, 0.5])
@pytest.mark.parametrize("chunk", [3, 512])
def test_logits_at_the_loss_window_give_the_full_gradient(
    batch: TrainBatch, entropy_coef: float, chunk: int
) -> None:
    """Logits at the loss window only, the LM head in chunks (3: several per row, and a
    padded last one), against every position's logits at once."""
    algorithm = AlgorithmSection(entropy_coef=entropy_coef)
    window, window_metrics = _train(
        batch, algorithm=algorithm, share_prompts=False, logits_chunk_tokens=chunk
    )
    full, full_metrics = _train(
        batch, algorithm=algorithm, learner=_EveryPositionLearner, share_prompts=False
    )
    _close(full, window)
    for key in ("loss/total", "entropy/mean", "is_weight/mean", "grad_norm"):
        assert window_metrics[key] == pytest.approx(full_metrics[key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("trainer", [{}, {"micro_batch_tokens": 64, "minibatches_per_step": 3}])
def test_shared_prompt_rows_give_the_plain_rows_gradient(batch: TrainBatch, trainer) -> None:
    positions = loss_positions(batch.loss_mask, 6)
    assert choose_rows(batch, positions, CONFIG, share_prompts=True).per_row == 4  # shared
    plain, plain_metrics = _train(batch, share_prompts=False, **trainer)
    shared, shared_metrics = _train(batch, **trainer)
    _close(plain, shared)
    # One minibatch: both see the same parameters, and their metrics agree to rounding.
    # Later minibatches run on parameters that the earlier updates (learning rate 100)
    # moved apart by rounding, which _close holds to 1e-3: their metrics drift to ~1e-5.
    rel = 1e-5 if trainer.get("minibatches_per_step", 1) == 1 else 1e-4
    for key in ("loss/total", "entropy/mean", "is_weight/mean", "grad_norm"):
        assert shared_metrics[key] == pytest.approx(plain_metrics[key], rel=rel, abs=1e-6), key


def test_the_entropy_bonus_has_a_gradient(batch: TrainBatch) -> None:
    # Without the bonus the entropy is a metric only (no gradient through the vocabulary);
    # with it, the update must differ.
    plain, plain_metrics = _train(batch)
    bonus, bonus_metrics = _train(batch, algorithm=AlgorithmSection(entropy_coef=0.5))
    assert bonus_metrics["entropy/mean"] == pytest.approx(plain_metrics["entropy/mean"])
    with pytest.raises(AssertionError):
        _close(plain, bonus, tolerance=0.05)


def test_on_policy_rollouts_match_the_trainer(batch: TrainBatch) -> None:
    """The learner reports the worst gap between the sampler's and its own log-probs.

    The 1e-5 parity contract itself is tested in test_sampler.py on a reference
    checkpoint. This model's weights are doubled, its logits reach ~15 (an fp32 ulp of
    ~1e-6 there), and a batched pass sums in another order than the sampler's decode
    step: its gap is fp32 noise of ~1e-5. What is checked here is that the metric is that
    gap (a misaligned or wrong log-prob would be off by ~1), and that it stays noise. The
    trainer's log-probabilities (its LM head by vocabulary slices) and
    ``teacher_forced_logprobs`` (the whole head) each carry that noise, so the two gaps
    agree within a few times 1e-5, not exactly.
    """
    _, metrics = _train(batch)
    teacher = teacher_forced_logprobs(_model(), batch.tokens, batch.valid, 1.0)
    gap = np.abs(np.asarray(teacher) - batch.sampler_logprobs)[batch.loss_mask].max()
    assert metrics["logprob_gap/trainer_max"] == pytest.approx(gap, abs=3e-5)
    assert metrics["logprob_gap/trainer_max"] < 1e-4
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


def test_the_step_counts_its_flops_by_xla_cost_analysis(batch: TrainBatch) -> None:
    """At least forward and backward of every parameter for every trained row token
    (2 + 4 FLOPs each); micro-batches add up to the same work."""
    whole, _ = _train(batch, share_prompts=False)
    micro, _ = _train(batch, share_prompts=False, micro_batch_tokens=32)
    params = sum(np.asarray(v).size for v in flat_params(_model()).values())
    trained = batch.num_loss_tokens
    assert whole.step_flops > 6 * params * trained
    assert micro.step_flops == pytest.approx(whole.step_flops, rel=0.5)


def test_every_chunk_of_the_lm_head_is_counted(batch: TrainBatch) -> None:
    """The head runs in a loop over chunks, whose body XLA's cost analysis counts once:
    the count must not fall with the chunk size."""
    whole, _ = _train(batch, share_prompts=False)
    chunked, _ = _train(batch, share_prompts=False, logits_chunk_tokens=4)
    assert chunked.step_flops == pytest.approx(whole.step_flops, rel=0.01)


def test_the_update_writes_the_new_parameters_into_the_gradients(batch: TrainBatch) -> None:
    """The update needs no parameter-sized buffer of its own: the gradients' buffers
    become the new parameters, and the old parameters stay intact (in the embedded run a
    version in the parameter store is those very arrays)."""
    learner = Learner(_model(), trainer=TrainerSection(learning_rate=1e-2),
                      algorithm=AlgorithmSection(), temperature=1.0, max_new_tokens=6)  # fmt: skip
    old = {name: np.asarray(a) for name, a in learner.flat_params().items()}  # views, on a CPU
    before = {name: a.copy() for name, a in old.items()}
    gradient_buffers: dict[str, int] = {}
    apply = learner._apply

    def spy(grads, *args):
        for name, array in params_by_name(grads).items():
            gradient_buffers[name] = array.unsafe_buffer_pointer()
        return apply(grads, *args)

    learner._apply = spy
    learner.train_step(batch, version=7)
    new = {name: a.unsafe_buffer_pointer() for name, a in learner.flat_params().items()}
    assert new == gradient_buffers
    params = learner.flat_params()
    assert any(not np.array_equal(params[name], before[name]) for name in params), "no update"
    for name, view in old.items():
        np.testing.assert_array_equal(view, before[name], err_msg=name)
