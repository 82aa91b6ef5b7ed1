"""The learner: recomputes log-probabilities, forms the loss, and steps the optimiser.

One training step consumes one :class:`TrainBatch`. Logits are computed only at the
completion's positions (:func:`~rlax_core.rl.algorithms.batch.loss_positions`). The step
is split into ``minibatches_per_step`` optimiser updates, each accumulated over
micro-batches of at most ``micro_batch_tokens`` tokens. Micro-batches use the whole
mini-batch's loss normalisers, so accumulating their gradients gives exactly the
mini-batch's gradient.

The same jitted code runs on one device or on a mesh: parameters carry their shardings
and micro-batches are split over the data-parallel axes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlax_core.config.sections import AlgorithmSection, TrainerSection
from rlax_core.models.logprobs import token_logprobs_and_entropy
from rlax_core.models.params import params_by_name
from rlax_core.models.qwen import Qwen
from rlax_core.models.sharding import batch_divisor, batch_sharding
from rlax_core.rl.algorithms.batch import TrainBatch, loss_positions
from rlax_core.rl.algorithms.losses import LossConfig, normalizers, policy_objective
from rlax_core.rl.algorithms.model_rows import ModelRows, choose_rows, shared_prompt_mask
from rlax_core.rl.algorithms.optimizer import learning_rate_schedule, make_optimizer

# Metrics combined by maximum across micro- and mini-batches; all others are sums of
# batch-normalised parts (micro-batches) and then means (mini-batches).
_MAX_METRICS = (
    "is_weight/max",
    "logprob_gap/trainer_max",
    "logprob_gap/stale_max",
    "is_ratio/on_policy_drift_max",
)


@dataclass(frozen=True)
class _Step:
    """One training step's batch, its loss windows and the model rows that hold them."""

    batch: TrainBatch
    positions: np.ndarray
    rows: ModelRows


class Learner:
    """Holds the policy's parameters and optimiser state and trains them.

    Args:
        model: the policy (its parameters are taken over; their shardings kept).
        trainer: optimiser and batching settings.
        algorithm: the objective.
        temperature: the sampling temperature of the rollouts (log-probabilities are
            computed under ``softmax(logits / T)``, like the sampler's).
        max_new_tokens: the completion limit (for the ``fixed_length`` aggregation).
        mesh: the device mesh the parameters live on, if any.
        reference: a frozen reference policy for the KL penalty.
    """

    def __init__(
        self,
        model: Qwen,
        *,
        trainer: TrainerSection,
        algorithm: AlgorithmSection,
        temperature: float,
        max_new_tokens: int,
        mesh: Mesh | None = None,
        reference: Qwen | None = None,
    ) -> None:
        self.config = model.config
        self.trainer = trainer
        self.graphdef, self.params = nnx.split(model)
        self.mesh = mesh
        self.temperature = float(temperature)
        total_updates = trainer.total_steps * trainer.minibatches_per_step
        self.tx = make_optimizer(trainer, total_updates)
        self.schedule = learning_rate_schedule(trainer, total_updates)
        self.opt_state = _init_on_mesh(self.tx, self.params, mesh)
        self.updates = 0
        self.step_flops = 0.0  # of the last train_step, by XLA's cost analysis
        self._flops_by_shape: dict[tuple, float] = {}
        self.loss_config = LossConfig(
            loss=algorithm.loss,
            aggregation=algorithm.aggregation,
            clip_low=algorithm.clip_low,
            clip_high=algorithm.clip_high,
            importance_ratio_cap=algorithm.importance_ratio_cap,
            kl_coef=algorithm.kl_coef,
            kl_estimator=algorithm.kl_estimator,
            entropy_coef=algorithm.entropy_coef,
            max_new_tokens=max_new_tokens,
        )
        self.reference_params = nnx.split(reference)[1] if reference is not None else None
        self._micro = jax.jit(self._micro_step)
        # Log-probabilities come back to the host whole: replicated, so that every process
        # of a multi-host trainer can read them.
        replicated = NamedSharding(mesh, PartitionSpec()) if mesh is not None else None
        self._logprobs = jax.jit(self._token_logprobs, out_shardings=replicated)
        # Later micro-batches add their gradient into the donated running sum inside the
        # step: no second gradient-sized buffer (a separate add would need one).
        self._micro_into = jax.jit(self._micro_step_into, donate_argnums=1)
        # The gradients and the optimiser state are donated: the new parameters are
        # written into the gradients' buffers, and the old ones stay valid. A version in
        # the parameter store may be those very arrays (the embedded run on a CPU
        # publishes them without a copy), so the update needs no parameter-sized buffer of
        # its own whether or not something else still holds the old parameters.
        self._apply = jax.jit(self._apply_update, donate_argnums=(0, 1))

    # -- the public surface --

    @property
    def model(self) -> Qwen:
        """The current policy as a model."""
        return nnx.merge(self.graphdef, self.params)

    def flat_params(self) -> dict[str, jax.Array]:
        """name → array of the current parameters (what the parameter store publishes)."""
        return params_by_name(self.params)

    def train_step(self, batch: TrainBatch, version: int) -> dict[str, float]:
        """One training step: ``minibatches_per_step`` optimiser updates on ``batch``.

        Args:
            batch: the step's sequences.
            version: the policy version of the current parameters (for the log-prob gap:
                rollouts of this version must match the trainer's log-probabilities).

        Returns:
            Scalar metrics of the step.
        """
        positions = loss_positions(batch.loss_mask, self.loss_config.max_new_tokens)
        rows = choose_rows(batch, positions, self.config, share_prompts=self.trainer.share_prompts)
        step = _Step(batch, positions, rows)
        order = np.arange(rows.count)  # mini-batches of whole rows (whole groups if shared)
        minibatches = np.array_split(order, min(self.trainer.minibatches_per_step, rows.count))
        prox = None
        if len(minibatches) > 1:  # the proximal policy: the weights before the first update
            prox = self._batched_logprobs(step, self.params)
        reference = None
        if self.reference_params is not None:
            reference = self._batched_logprobs(step, self.reference_params)
        step_metrics: list[dict[str, float]] = []
        self.step_flops = 0.0
        for part in minibatches:
            step_metrics.append(self._update(step, part, version, prox, reference))
        return _combine(step_metrics, mean=True)

    def state(self) -> dict[str, Any]:
        """The pytree a checkpoint saves (parameters, optimiser state, reference)."""
        state = {"params": self.params, "opt_state": self.opt_state}
        if self.reference_params is not None:
            state["reference"] = self.reference_params
        return state

    def restore(self, state: Mapping[str, Any], updates: int) -> None:
        """Takes over a checkpoint's pytree (see :meth:`state`)."""
        self.params = state["params"]
        self.opt_state = state["opt_state"]
        if "reference" in state:
            self.reference_params = state["reference"]
        self.updates = updates

    # -- internals --

    def _micro_size(self, length: int, rows: int) -> int:
        size = max(1, self.trainer.micro_batch_tokens // length)
        size = 1 << (size.bit_length() - 1)  # powers of two: bounded compilations
        size = min(size, 1 << max(0, (rows - 1).bit_length()))  # no more rows than needed
        divisor = batch_divisor(self.mesh) if self.mesh is not None else 1
        return -(-size // divisor) * divisor

    def _micro_arrays(self, step: _Step, part: np.ndarray, size: int, extra: dict) -> dict:
        """The device arrays of one micro-batch: model rows ``part``, padded to ``size``.

        Per-target arrays are taken at the loss window of the rows' sequences; ``extra``
        arrays are per-window already.
        """
        rows, batch = step.rows, step.batch
        sequences = rows.sequences(part)

        def pad(values: np.ndarray, count: int = size, fill: int = 0) -> np.ndarray:
            out = np.full((count, *values.shape[1:]), fill, values.dtype)
            out[: len(values)] = values
            return out

        def per_sequence(values: np.ndarray) -> np.ndarray:
            return pad(values, size * rows.per_row)

        at = step.positions[sequences]

        def window(array: np.ndarray) -> np.ndarray:
            return per_sequence(np.take_along_axis(array[sequences], at, axis=1))

        arrays = {
            "tokens": pad(rows.tokens[part]),
            "valid": pad(rows.valid[part]),
            "logits_at": pad(rows.logits_at[part]),
            "targets": pad(rows.targets[part]),
            "loss_mask": window(batch.loss_mask),
            "behaviour": window(batch.behaviour_logprobs),
            "sampler": window(batch.sampler_logprobs),
            "advantages": per_sequence(batch.advantages[sequences]),
            "versions": per_sequence(batch.versions[sequences]),
        }
        if rows.segments is not None:  # the shared-prompt layout
            arrays["segments"] = pad(rows.segments[part], fill=-1)
            arrays["rope"] = pad(rows.rope[part])
        arrays.update({k: per_sequence(v[sequences]) for k, v in extra.items() if v is not None})
        if self.mesh is not None:
            # Each process places its own rows (every process holds the whole batch);
            # device_put would first compare the values across processes.
            arrays = {
                k: jax.make_array_from_callback(
                    v.shape, batch_sharding(self.mesh, v.ndim), lambda index, v=v: v[index]
                )
                for k, v in arrays.items()
            }
        return arrays

    def _chunks(self, rows: np.ndarray, length: int) -> tuple[list[np.ndarray], int]:
        size = self._micro_size(length, len(rows))
        return [rows[i : i + size] for i in range(0, len(rows), size)], size

    def _update(
        self,
        step: _Step,
        part: np.ndarray,
        version: int,
        prox: np.ndarray | None,
        reference: np.ndarray | None,
    ) -> dict[str, float]:
        mask = step.batch.loss_mask[step.rows.sequences(part)]
        norms = normalizers(mask, self.loss_config.max_new_tokens)
        chunks, size = self._chunks(part, step.rows.tokens.shape[1])
        grads = None
        parts = []
        extra = {"prox": prox, "reference": reference}
        for chunk in chunks:
            arrays = self._micro_arrays(step, chunk, size, extra)
            if grads is None:
                grads, metrics = self._micro(self.params, arrays, norms, jnp.int32(version))
            else:
                grads, metrics = self._micro_into(
                    self.params, grads, arrays, norms, jnp.int32(version)
                )
            self.step_flops += self._micro_flops(arrays, norms, version)
            parts.append(metrics)
        learning_rate = float(self.schedule(self.updates))
        self.params, self.opt_state, grad_norm = self._apply(grads, self.opt_state, self.params)
        self.updates += 1
        metrics = _combine(jax.device_get(parts), mean=False)
        metrics["grad_norm"] = float(grad_norm)
        metrics["learning_rate"] = learning_rate
        return metrics

    def _micro_flops(self, arrays: dict, norms: dict, version: int) -> float:
        """FLOPs of one micro-step of these shapes, by XLA's cost analysis of its program.

        Rematerialised layers count twice (they are computed twice). The program counted
        is the step with its LM-head chunks unrolled: XLA counts a loop's body once.
        Found once per shape: lowering traces the step again, but compiles nothing.
        """
        key = tuple((k, v.shape, v.dtype.name) for k, v in sorted(arrays.items()))
        if key not in self._flops_by_shape:
            counted = jax.jit(partial(self._micro_step, unrolled=True))
            lowered = counted.lower(self.params, arrays, norms, jnp.int32(version))
            cost = lowered.cost_analysis() or {}
            self._flops_by_shape[key] = float(cost.get("flops", float("nan")))
        return self._flops_by_shape[key]

    def _policy(
        self,
        params: nnx.State,
        arrays: dict,
        *,
        entropy_gradient: bool = False,
        unrolled: bool = False,
    ) -> tuple[jax.Array, jax.Array]:
        """At the loss windows: the targets' log-probabilities and the entropy, (N, W) each.

        The LM head runs a slice of the vocabulary at a time, ``trainer.logits_chunk_tokens``
        positions' worth of logits (a loop over the slices, unless ``unrolled``: see
        :func:`token_logprobs_and_entropy`).
        """
        segments = arrays.get("segments")
        model = nnx.merge(self.graphdef, params)
        hidden = model(
            arrays["tokens"],
            arrays["valid"],
            positions=arrays.get("rope"),
            attention_mask=None if segments is None else shared_prompt_mask(segments),
            logits_at=arrays["logits_at"],
            head=False,
        ).final_hidden
        logp, entropy = token_logprobs_and_entropy(
            model,
            hidden,
            arrays["targets"],
            self.temperature,
            chunk=self.trainer.logits_chunk_tokens,
            entropy_gradient=entropy_gradient,
            unrolled=unrolled,
        )
        width = arrays["loss_mask"].shape[1]  # rows of several sequences: one row each
        return logp.reshape(-1, width), entropy.reshape(-1, width)

    def _token_logprobs(self, params: nnx.State, arrays: dict) -> jax.Array:
        return self._policy(params, arrays)[0]

    def _batched_logprobs(self, step: _Step, params: nnx.State) -> np.ndarray:
        """Log-probabilities of the loss windows' targets under ``params``: (N, W)."""
        rows = step.rows
        chunks, size = self._chunks(np.arange(rows.count), rows.tokens.shape[1])
        out = np.zeros(step.positions.shape, np.float32)
        inputs = ("tokens", "valid", "rope", "logits_at", "targets", "segments", "loss_mask")
        for chunk in chunks:
            arrays = self._micro_arrays(step, chunk, size, {})
            values = self._logprobs(params, {k: v for k, v in arrays.items() if k in inputs})
            sequences = rows.sequences(chunk)
            out[sequences] = np.asarray(values)[: len(sequences)]
        return out

    def _micro_step(
        self,
        params: nnx.State,
        arrays: dict,
        norms: dict,
        version: jax.Array,
        *,
        unrolled: bool = False,
    ) -> tuple[nnx.State, dict]:
        cfg = self.loss_config

        def loss_fn(params: nnx.State) -> tuple[jax.Array, dict]:
            # Without an entropy bonus the entropy is a metric: no gradient through it.
            logp, entropy = self._policy(
                params, arrays, entropy_gradient=cfg.entropy_coef != 0, unrolled=unrolled
            )
            prox = arrays.get("prox", jax.lax.stop_gradient(logp))
            loss, metrics = policy_objective(
                logp,
                prox,
                arrays["behaviour"],
                arrays["advantages"],
                arrays["loss_mask"],
                cfg,
                ref=arrays.get("reference"),
                entropy=entropy,
                batch_normalizers=norms,
            )
            # The train/inference gap on the trainer's side: rollouts sampled with the
            # current weights must agree with the trainer's log-probabilities (within
            # 1e-5 in fp32). Older rollouts measure how far the policy moved instead.
            sampled = arrays["sampler"]
            usable = arrays["loss_mask"] & jnp.isfinite(sampled)
            gap = jnp.where(usable, jnp.abs(jax.lax.stop_gradient(logp) - sampled), -1.0)
            on_policy = arrays["versions"][:, None] == version
            # −1 marks "no such token in this micro-batch" (made NaN when combined).
            metrics["logprob_gap/trainer_max"] = jnp.where(on_policy, gap, -1.0).max()
            # What the gap does to the loss: on-policy importance ratios should be 1.
            drift = jnp.abs(jnp.expm1(jax.lax.stop_gradient(logp) - sampled))
            usable_on_policy = usable & on_policy
            metrics["is_ratio/on_policy_drift_max"] = jnp.where(usable_on_policy, drift, -1.0).max()
            metrics["logprob_gap/stale_max"] = jnp.where(on_policy, -1.0, gap).max()
            return loss, metrics

        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return grads, metrics

    def _micro_step_into(
        self, params: nnx.State, grads: nnx.State, arrays: dict, norms: dict, version: jax.Array
    ) -> tuple[nnx.State, dict]:
        more, metrics = self._micro_step(params, arrays, norms, version)
        return jax.tree.map(jnp.add, grads, more), metrics

    def _apply_update(
        self, grads: nnx.State, opt_state: optax.OptState, params: nnx.State
    ) -> tuple[nnx.State, optax.OptState, jax.Array]:
        updates, opt_state = self.tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, optax.tree.norm(grads)


def _init_on_mesh(
    tx: optax.GradientTransformation, params: nnx.State, mesh: Mesh | None
) -> optax.OptState:
    """The optimiser state, every array of it on ``mesh``.

    XLA places the step counters (constants) on one device; a multi-host checkpoint and
    step need every array on the global mesh, so those are replicated over it instead.
    """
    init = jax.jit(tx.init)
    if mesh is None:
        return init(params)
    replicated = NamedSharding(mesh, PartitionSpec())
    placed = jax.tree.map(
        lambda s: s if isinstance(s, NamedSharding) else replicated,
        init.lower(params).compile().output_shardings,
    )
    return jax.jit(tx.init, out_shardings=placed)(params)


def _combine(parts: list[dict], *, mean: bool) -> dict[str, float]:
    """Sums (micro-batches) or averages (mini-batches) metrics; maxima stay maxima."""
    keys = {k for part in parts for k in part}
    combined = {}
    for key in keys:
        values = [float(part[key]) for part in parts if key in part]
        if key in _MAX_METRICS:
            combined[key] = max(values)
            if combined[key] < 0:
                combined[key] = float("nan")
        else:
            combined[key] = sum(values) / (len(values) if mean else 1)
    return combined
