"""The trainer's side of a run: controller, learner, publishing, evaluation, checkpoints.

Each step: wait for ``prompts_per_step`` trainable rollout groups (the controller keeps
workers supplied within the staleness bound), build the batch, train, publish the new
policy version, evaluate when due, checkpoint when due, log the step.

A multi-host trainer runs this on every process (see
:mod:`rlax_core.rl.roles.trainer_processes`): all of them build the model on the global mesh,
warm-start, train, and checkpoint together; only the leader (process 0) has a
controller, a parameter store, an evaluator and the metrics.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.transport import Transport
from rlax_core.models.params import flat_params, host_model, replace_params
from rlax_core.models.pretrained import save_pretrained
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE
from rlax_core.plugins.registry import Registry
from rlax_core.rl.algorithms.batch import build_batch
from rlax_core.rl.roles import components
from rlax_core.rl.roles.controller import Controller
from rlax_core.rl.roles.evaluator import Evaluator
from rlax_core.rl.roles.learner import Learner
from rlax_core.rl.roles.progress import StepProgress
from rlax_core.rl.roles.trainer_processes import TrainerProcesses
from rlax_core.rl.roles.warm_start import warm_start
from rlax_core.run_dir.checkpoints import CheckpointStore
from rlax_core.run_dir.layout import prepare
from rlax_core.run_dir.metrics import MetricsLog
from rlax_core.run_dir.status import write_status

# The warm start draws its examples from a stream of its own, so the RL cursor (and an
# exact resume) does not depend on it.
_WARM_START_SEED_OFFSET = 0x5F7


class TrainerRun:
    """Everything the trainer process owns, built from the run config.

    Args:
        config: the validated run config.
        config_dir: directory of the config file (relative paths start there).
        run_dir: the run directory.
        registry: the installed plugins.
        transport: the run's transport (store and queues); None on the processes of a
            multi-host trainer other than the leader.
        resume: continue from the newest checkpoint in ``run_dir`` if there is one.
        progress: show a progress bar.
    """

    def __init__(
        self,
        config: RunConfigBase,
        *,
        config_dir: Path,
        run_dir: Path,
        registry: Registry,
        transport: Transport | None,
        resume: bool,
        progress: bool = True,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.processes = TrainerProcesses()
        leader = self.processes.is_leader
        self.checkpoints = CheckpointStore(run_dir / "checkpoints", keep=config.checkpoint.keep)
        resumed_from = self.checkpoints.latest_step() if resume else None
        # Every process checks the run directory (so a bad one stops them all alike);
        # the leader writes it.
        prepare(
            run_dir,
            config,
            resume=resume,
            has_checkpoint=self.checkpoints.latest_step() is not None,
            write=leader,
        )
        self.tokenizer = components.load_tokenizer(config, config_dir)
        self.tokenizer_dir = components.tokenizer_dir(config, config_dir)
        self.stop_token_ids = components.stop_token_ids(self.tokenizer)
        self.mesh = components.mesh_of(config)
        model = components.build_model(config, config_dir, mesh=self.mesh)
        self.mixture = self.store = self.controller = self.metrics = None
        self.judge = None
        if leader:
            assert transport is not None, "the leader needs the transport"
            self.mixture, next_prompt = components.train_prompts(config, config_dir, self.tokenizer)
            self.judge = components.build_judge(registry, config, run_dir)
            self.store = transport.parameter_store()
            self.controller = Controller(
                next_prompt,
                prompts=transport.queue("prompts"),
                rollouts=transport.queue("rollouts"),
                rollout=config.rollout,
                staleness=config.staleness,
                algorithm=config.algorithm,
            )
            self.metrics = MetricsLog(
                run_dir,
                resume_from_step=resumed_from,
                wandb=config.metrics.wandb,
                run_config=config.model_dump(mode="json"),
            )
        self.step = 0
        self.version = 0
        self._saved_step: int | None = None
        if resumed_from is None and config.warm_start.steps:
            model = self._warm_start(model, config_dir)
        reference = _device_copy(model) if config.algorithm.kl_coef > 0 else None
        self.learner = Learner(
            model,
            trainer=config.trainer,
            algorithm=config.algorithm,
            temperature=config.rollout.temperature,
            max_new_tokens=config.rollout.max_new_tokens,
            mesh=self.mesh,
            reference=reference,
        )
        eval_set = components.eval_prompts(config, config_dir, self.tokenizer)
        if self.processes.distributed and eval_set:
            # The leader evaluates alone, on a copy of the whole policy on its own device.
            host = self.processes.host_params(flat_params(model))
            model = host_model(model.config, host) if leader else None
        self.evaluator = (
            Evaluator(
                _copy(model),
                tokenizer=self.tokenizer,
                judge=self.judge,
                prompts=eval_set,
                config=config.eval,
                max_new_tokens=config.rollout.max_new_tokens,
                stop_token_ids=self.stop_token_ids,
                seed=config.run.seed,
            )
            if eval_set and leader
            else None
        )
        self.resumed = resumed_from is not None
        if self.resumed:
            self._restore()
        self._progress = StepProgress(config.trainer.total_steps, enabled=progress and leader)

    def worker_model(self) -> Qwen:
        """A private copy of the current policy, for an in-process inference worker."""
        return _copy(self.learner.model)

    def run(self, stop: threading.Event) -> bool:
        """Trains until ``total_steps`` or ``stop``; returns True if the run finished.

        On a multi-host trainer every process calls this; a stop asked of any of them
        stops all of them (see :class:`TrainerProcesses`).
        """
        total = self.config.trainer.total_steps
        if self.store is not None:
            latest = self.store.latest()
            if latest is not None and latest.version >= self.version:
                self.version = latest.version + 1  # versions are never reused across restarts
        self.version = self.processes.share(self.version)
        host = self._publish()
        if self.processes.is_leader:  # at once (then after every step): a fresh trainer shows
            write_status(self.run_dir, "trainer", {"role": "trainer", "step": self.step,
                                                   "policy_version": self.version})  # fmt: skip
        if not self.resumed:
            first = {"policy_version": self.version, **self._evaluate(host)}
            if self.metrics is not None:
                self.metrics.write(0, first)
            self._checkpoint()  # the warm start is never redone
        with self._progress:
            self._progress.update(self.step, {})
            while self.step < total:
                if not self._train_one(stop):
                    break
        finished = self.step >= total
        if self.step > 0 and self._saved_step != self.step:
            self._checkpoint()  # a finished or stopped run leaves its last step saved
        if finished:
            self._export()
        return finished

    def close(self) -> None:
        """Closes the metrics and checkpoint writers."""
        if self.metrics is not None:
            self.metrics.close()
        self.checkpoints.close()

    def _train_one(self, stop: threading.Event) -> bool:
        """One step (on every process); False when the run is to stop after it."""
        started = time.monotonic()
        wait_for_batch = None
        if self.controller is not None:
            controller, version = self.controller, self.version

            def wait_for_batch(should_stop):
                return controller.next_batch(version, should_stop=should_stop)

        groups, stopping = self.processes.next_batch(wait_for_batch, stop)
        if groups is None:
            return False
        waited = time.monotonic() - started
        algorithm = self.config.algorithm
        batch, metrics = build_batch(
            groups, advantage=algorithm.advantage, overlong_filter=algorithm.overlong_filter
        )
        if self.controller is not None:
            metrics.update(self.controller.staleness_metrics(groups, self.version))
        train_started = time.monotonic()
        metrics.update(self.learner.train_step(batch, self.version))
        jax.block_until_ready(self.learner.params)
        train_s = time.monotonic() - train_started
        self.step += 1
        self.version += 1
        host = self._publish()
        if self.controller is not None:
            self.controller.renew_leases()
        every = self.config.eval.every_steps
        if self.step == self.config.trainer.total_steps or (every and self.step % every == 0):
            metrics.update(self._evaluate(host))
        step_s = time.monotonic() - started
        metrics.update(
            {
                "policy_version": self.version,
                "time/step_s": step_s,
                "time/wait_s": waited,
                "time/train_s": train_s,
                "throughput/samples_per_s": batch.num_sequences / step_s,
                "throughput/train_tokens_per_s": batch.num_loss_tokens / max(train_s, 1e-9),
            }
        )
        if self.controller is not None and self.metrics is not None:
            metrics.update(self.controller.accounting.as_metrics())
            self.metrics.write(self.step, metrics)
        if self.step % self.config.checkpoint.every_steps == 0:
            self._checkpoint()  # after the step's metrics line: a resume never loses it
        if self.processes.is_leader:
            rate = {"samples_per_s": metrics["throughput/samples_per_s"]}
            status = {"role": "trainer", "step": self.step, "policy_version": self.version}
            write_status(self.run_dir, "trainer", {**status, "throughput": rate})
        self._progress.update(self.step, metrics)
        return not stopping

    def _publish(self) -> dict:
        """Publishes the current policy from the leader; returns its host parameters.

        Collective on a multi-host trainer: every process helps gather the parameters.
        """
        host = self.processes.host_params(self.learner.flat_params())
        if self.store is not None:
            self.store.publish(self.version, host, {"step": self.step})
        return host

    def _export(self) -> None:
        """Writes the trained policy as a Hugging Face checkpoint: RUN_DIR/final/."""
        model = self.learner.model
        if self.processes.distributed:
            host = self.processes.host_params(self.learner.flat_params())
            model = host_model(model.config, host)
        if not self.processes.is_leader:
            return
        final = self.run_dir / "final"
        save_pretrained(model, final)
        for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE):
            source = self.tokenizer_dir / name
            if source.exists():
                shutil.copyfile(source, final / name)

    def _evaluate(self, host: dict) -> dict[str, float]:
        """Evaluates the policy whose parameters are ``host`` (on the leader only)."""
        if self.evaluator is None:
            return {}
        if self.processes.distributed:
            return self.evaluator.run(host_model(self.learner.config, host))
        return self.evaluator.run(self.learner.model)

    def _checkpoint(self) -> None:
        """Saves the RL state; collective (every process writes its shards)."""
        meta = {"step": self.step, "version": self.version, "updates": self.learner.updates}
        if self.controller is not None:  # the leader's JSON is the checkpoint's
            meta["mixture"] = self.mixture.state()
            meta["controller"] = self.controller.state()
        self.checkpoints.save(self.step, self.learner.state(), meta)
        self._saved_step = self.step
        if self.controller is not None:
            self.controller.acknowledge_trained()

    def _restore(self) -> None:
        state, meta = self.checkpoints.restore(self.learner.state())
        self.learner.restore(state, meta["updates"])
        if self.controller is not None:
            self.mixture.restore(meta["mixture"])
            self.controller.restore(meta["controller"])
        self.step = meta["step"]
        self.version = meta["version"]
        self._saved_step = self.step

    def _warm_start(self, model: Qwen, config_dir: Path) -> Qwen:
        # Every process draws the same examples (the same seeded stream) and takes part.
        _, next_prompt = components.train_prompts(
            self.config,
            config_dir,
            self.tokenizer,
            seed=self.config.run.seed + _WARM_START_SEED_OFFSET,
        )

        def next_example() -> tuple[list[int], dict]:
            _, tokens, problem = next_prompt()
            return tokens, problem

        losses: list[float] = []
        model = warm_start(
            model,
            next_example,
            self.tokenizer.encode,
            self.tokenizer.eos_token_id,
            self.config.warm_start,
            on_step=lambda step, loss: losses.append(loss),
        )
        final_loss = losses[-1] if losses else None
        if self.processes.is_leader:
            status = {"role": "trainer", "steps": len(losses), "final_loss": final_loss}
            write_status(self.run_dir, "warm_start", status)
        return model


def _copy(model: Qwen | None) -> Qwen | None:
    """A model with private copies of ``model``'s arrays (safe from buffer donation)."""
    if model is None:
        return None
    return replace_params(model, flat_params(model))  # (it copies through the host)


def _device_copy(model: Qwen) -> Qwen:
    """A copy of ``model`` with the same (possibly multi-process) shardings."""
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.jit(lambda s: jax.tree.map(jnp.copy, s))(state))
