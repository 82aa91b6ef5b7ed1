"""The trainer's side of a run: controller, learner, publishing, evaluation, checkpoints.

Each step: wait for ``prompts_per_step`` trainable rollout groups (the controller keeps
workers supplied within the staleness bound), build the batch, train, publish the new
policy version, evaluate when due, checkpoint when due, log the step.

A multi-host trainer runs this on every process (see
:mod:`~rlax_core.rl.roles.trainer_processes`): all of them build the model on the global
mesh, warm-start, train, and checkpoint together. What only the leader (process 0) does
— the controller, the parameter store, evaluation, metrics and status — is its
:class:`~rlax_core.rl.roles.trainer_duties.LeaderDuties`; the other processes have
:class:`~rlax_core.rl.roles.trainer_duties.FollowerDuties`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.memory import memory_metrics
from rlax_core.models.params import flat_params, host_model, replace_params
from rlax_core.models.qwen import Qwen
from rlax_core.plugins.registry import Registry
from rlax_core.rl.algorithms.batch import build_batch
from rlax_core.rl.roles import components
from rlax_core.rl.roles.learner import Learner
from rlax_core.rl.roles.trainer_duties import FollowerDuties, LeaderDuties, TrainerDuties
from rlax_core.rl.roles.trainer_processes import TrainerProcesses
from rlax_core.rl.roles.warm_start import demonstration, target, warm_start
from rlax_core.run_dir.checkpoints import CheckpointStore
from rlax_core.run_dir.layout import FINAL_DIR, prepare
from rlax_core.transport.host_memory import return_freed_memory

# The warm start draws its examples from a stream of its own, so the RL cursor (and an
# exact resume) does not depend on it.
_WARM_START_SEED_OFFSET = 0x5F7


class TrainerRun:
    """Everything a trainer process owns, built from the run config.

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
        return_freed_memory()  # or glibc keeps each step's freed buffers: RSS grows
        self.config = config
        self.run_dir = run_dir
        self.processes = TrainerProcesses()
        self.checkpoints = CheckpointStore(
            run_dir / "checkpoints",
            keep=config.checkpoint.keep,
            asynchronous=not self.processes.distributed,
        )
        resumed_from = self.checkpoints.latest_step() if resume else None
        # Resuming a run that never committed a checkpoint starts it over: what it
        # logged is dropped (-1: no step's metrics stand), and its rollouts, never
        # acknowledged, come back to be trained again.
        metrics_from = (-1 if resumed_from is None else resumed_from) if resume else None
        # Every process checks the run directory (so a bad one stops them all alike);
        # the leader writes it.
        prepare(
            run_dir,
            config,
            resume=resume,
            has_checkpoint=self.checkpoints.latest_step() is not None,
            config_dir=config_dir,
            write=self.processes.is_leader,
        )
        self.tokenizer = components.load_tokenizer(config, config_dir)
        self.tokenizer_dir = components.tokenizer_dir(config, config_dir)
        self.stop_token_ids = components.stop_token_ids(self.tokenizer)
        # The environment's tools are listed in prompts; a multi-turn one evaluates too.
        self.environment = components.build_environment(registry, config, run_dir)
        self.tools = [tool.schema() for tool in self.environment.tools]
        self.mesh = components.mesh_of(config)
        model = components.build_model(config, config_dir, mesh=self.mesh)
        components.check_vocabulary(model.config.vocab_size, self.tokenizer)
        leader: LeaderDuties | None = None
        if self.processes.is_leader:
            if transport is None:
                raise RlaxError("the trainer's leader process needs the run's transport")
            leader = LeaderDuties(config, config_dir=config_dir, run_dir=run_dir,
                                  registry=registry, transport=transport, tokenizer=self.tokenizer,
                                  tools=self.tools, resumed_from=metrics_from,
                                  progress=progress)  # fmt: skip
        self.duties: TrainerDuties = leader or FollowerDuties()
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
        eval_set = components.eval_prompts(config, config_dir, self.tokenizer, tools=self.tools)
        if eval_set:
            if self.processes.distributed:
                # The leader evaluates alone, on a copy of the whole policy on its own
                # device; gathering it is collective.
                model = host_model(model.config, self.processes.host_params(flat_params(model)))
            if leader is not None:
                leader.evaluate_with(_copy(model), self.tokenizer, eval_set, self.environment)
        self.resumed = resumed_from is not None
        if self.resumed:
            self._restore()

    @property
    def judge(self) -> Judge | None:
        """The run's judge (the leader's; None on the other processes of a trainer)."""
        return self.duties.judge

    def worker_model(self) -> Qwen:
        """A private copy of the current policy, for an in-process inference worker."""
        return _copy(self.learner.model)

    def run(self, stop: threading.Event) -> bool:
        """Trains until ``total_steps`` or ``stop``; returns True if the run finished.

        On a multi-host trainer every process calls this; a stop asked of any of them
        stops all of them (see :class:`TrainerProcesses`).
        """
        total = self.config.trainer.total_steps
        newest = self.duties.newest_published()
        if newest is not None and newest >= self.version:
            self.version = newest + 1  # versions are never reused across restarts
        self.version = self.processes.share(self.version)
        host = self._publish()
        # At once (then after every step): a fresh trainer shows in `rlax status`.
        self.duties.report("trainer", {"step": self.step, "policy_version": self.version})
        progress = self.duties.progress
        with progress:
            progress.update(self.step, {})
            if not self.resumed:
                self.duties.log(0, {"policy_version": self.version, **self._evaluate(host)})
                if self.config.checkpoint.at_start or self.config.warm_start.steps:
                    self._checkpoint()  # the warm start is never redone
            del host  # the first version's arrays: held here, they would outlive it all run
            while self.step < total:
                if not self._train_one(stop):
                    break
        finished = self.step >= total
        if self.step > 0 and self._saved_step != self.step:
            self._checkpoint()  # a finished or stopped run leaves its last step saved
        if finished:
            self._export()
        self._committed(self.checkpoints.wait())
        return finished

    def close(self) -> None:
        """Closes the metrics and checkpoint writers, and the environment."""
        self.duties.close()
        self.checkpoints.close()
        self.environment.close()

    def _committed(self, steps: list[int]) -> None:
        for step in steps:
            self.duties.checkpointed(step)

    def _train_one(self, stop: threading.Event) -> bool:
        """One step (on every process); False when the run is to stop after it."""
        started = time.monotonic()
        groups, stopping = self.processes.next_batch(self.duties.batch_source(self.version), stop)
        if groups is None:
            return False
        waited = time.monotonic() - started
        algorithm = self.config.algorithm
        batch, metrics = build_batch(
            groups, advantage=algorithm.advantage, overlong_filter=algorithm.overlong_filter
        )
        metrics.update(self.duties.batch_metrics(groups, self.version))
        # The update donates the optimiser state a checkpoint may still be copying.
        checkpoint_wait = self.checkpoints.ready()
        train_started = time.monotonic()
        metrics.update(self.learner.train_step(batch, self.version))
        jax.block_until_ready(self.learner.params)
        train_s = time.monotonic() - train_started
        self.step += 1
        self.version += 1
        host = self._publish()
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
                "time/checkpoint_wait_s": checkpoint_wait,
                **memory_metrics(),
                "throughput/samples_per_s": batch.num_sequences / step_s,
                "throughput/train_tokens_per_s": batch.num_loss_tokens / max(train_s, 1e-9),
                "throughput/train_flops_per_s": self.learner.step_flops / max(train_s, 1e-9),
            }
        )
        self.duties.log(self.step, metrics)
        self._committed(self.checkpoints.committed())
        if self.step % self.config.checkpoint.every_steps == 0:
            self._checkpoint()  # after the step's metrics line: a resume never loses it
        rate = {"samples_per_s": metrics["throughput/samples_per_s"]}
        status = {"step": self.step, "policy_version": self.version, "throughput": rate}
        self.duties.report("trainer", status)
        self.duties.progress.update(self.step, metrics)
        return not stopping

    def _publish(self) -> dict:
        """Publishes the current policy from the leader; returns its host parameters.

        Collective on a multi-host trainer: every process helps gather the parameters.
        """
        host = self.processes.host_params(self.learner.flat_params())
        self.duties.publish(self.version, host, self.step)
        return host

    def _policy(self, host: dict) -> Callable[[], Qwen]:
        """Builds the current policy: the learner's model, or one from gathered ``host``."""
        if self.processes.distributed:
            return lambda: host_model(self.learner.config, host)
        return lambda: self.learner.model

    def _export(self) -> None:
        """Writes the trained policy as a Hugging Face checkpoint: RUN_DIR/final/."""
        host = self.processes.host_params(self.learner.flat_params())  # collective
        self.duties.export(self._policy(host), self.run_dir / FINAL_DIR, self.tokenizer_dir)

    def _evaluate(self, host: dict) -> dict[str, float]:
        """Evaluates the policy whose parameters are ``host`` (on the leader only)."""
        return self.duties.evaluate(self._policy(host))

    def _checkpoint(self) -> None:
        """Starts saving the RL state; collective (every process writes its shards).

        The arrays are copied and the files written in the background; the next update
        waits for the copy only if it is not done (``time/checkpoint_wait_s``). The
        rollouts the checkpoint covers are acknowledged once it is committed
        (:meth:`_committed`).
        """
        meta = {"step": self.step, "version": self.version, "updates": self.learner.updates}
        meta.update(self.duties.checkpoint_state(self.step))
        self.checkpoints.save(self.step, self.learner.state(), meta)
        self._saved_step = self.step

    def _restore(self) -> None:
        state, meta = self.checkpoints.restore(self.learner.state())
        self.learner.restore(state, meta["updates"])
        self.duties.restore(meta)
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
            tools=self.tools,
        )

        def next_example() -> tuple[list[int], dict]:
            _, tokens, problem = next_prompt()
            return tokens, problem

        section, eos = self.config.warm_start, self.tokenizer.eos_token_id
        demonstrate = target(section.target_template, self.tokenizer.encode, eos,
                             field="warm_start.target_template")  # fmt: skip
        if section.turns is not None:
            if not self.environment.multi_turn:
                raise ConfigError("warm_start.turns demonstrates several turns, but the "
                                  "environment answers none: set environment (e.g. "
                                  "{type: tools})")  # fmt: skip
            self.environment.bind(self.tokenizer)
            demonstrate = demonstration(section.turns, self.environment, self.tokenizer, eos)
        losses: list[float] = []

        with self.duties.progress.warm_start(section.steps) as show:

            def on_step(step: int, loss: float) -> None:
                losses.append(loss)
                show(step, loss)

            model = warm_start(model, next_example, demonstrate, section, on_step=on_step)
        final_loss = losses[-1] if losses else None
        self.duties.report("warm_start", {"steps": len(losses), "final_loss": final_loss})
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
