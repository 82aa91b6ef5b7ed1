"""What a trainer process does besides training: the leader's duties, or a follower's.

Every process of a trainer trains (see :mod:`~rlax_core.rl.roles.trainer`). Only the
leader (process 0) also talks to the outside world: it draws prompts and runs the
controller, publishes weights, evaluates, writes metrics and status files, and holds
the data cursor and the controller's state that go into a checkpoint. The trainer's
loop calls the same methods on every process; :class:`LeaderDuties` does the work and
:class:`FollowerDuties` does nothing, because a follower's batch comes from the leader
(:meth:`~rlax_core.rl.roles.trainer_processes.TrainerProcesses.next_batch`) and its
parameters are published by the leader.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.environment import Environment
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.models.pretrained import save_pretrained
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, Tokenizer
from rlax_core.plugins.registry import Registry
from rlax_core.rl.roles import components, queues
from rlax_core.rl.roles.controller import Controller
from rlax_core.rl.roles.evaluator import Evaluator
from rlax_core.rl.roles.progress import StepProgress
from rlax_core.rl.roles.streaming_worker import engine_metrics
from rlax_core.run_dir.metrics import MetricsLog
from rlax_core.run_dir.status import read_statuses, write_status
from rlax_core.types.rollout import RolloutGroup

WaitForBatch = Callable[[Callable[[], bool]], list[RolloutGroup] | None]


log = logging.getLogger(__name__)


class TrainerDuties(ABC):
    """The outside world of one trainer process; see the module docstring.

    Attributes:
        judge: the run's judge (the leader's; None on a follower).
        progress: the progress display (shown by the leader only).
    """

    judge: Judge | None = None
    progress: StepProgress

    @abstractmethod
    def newest_published(self) -> int | None:
        """The newest version in the parameter store (a restarted trainer goes past it)."""

    @abstractmethod
    def batch_source(self, version: int) -> WaitForBatch | None:
        """How to wait for the next batch trained at ``version``; None: from the leader."""

    @abstractmethod
    def publish(self, version: int, params: Mapping[str, Any], step: int) -> None:
        """Publishes the policy's host parameters as ``version``."""

    @abstractmethod
    def batch_metrics(self, groups: list[RolloutGroup], version: int) -> dict[str, float]:
        """Metrics of the batch that the controller alone knows (staleness)."""

    @abstractmethod
    def evaluate(self, policy: Callable[[], Qwen]) -> dict[str, float]:
        """Evaluation metrics of the policy ``policy()`` builds (called only if evaluating)."""

    @abstractmethod
    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Writes the step's metrics (with the controller's accounting)."""

    @abstractmethod
    def report(self, name: str, fields: dict[str, Any]) -> None:
        """Writes the status file ``name`` (``rlax status`` shows it)."""

    @abstractmethod
    def checkpoint_state(self, step: int) -> dict[str, Any]:
        """The JSON part of the checkpoint of ``step`` that only the leader holds.

        It covers the batches trained so far: :meth:`checkpointed` acknowledges them
        once that checkpoint is committed.
        """

    @abstractmethod
    def restore(self, meta: Mapping[str, Any]) -> None:
        """Restores the leader's part of a checkpoint's JSON."""

    @abstractmethod
    def checkpointed(self, step: int) -> None:
        """Notes that the checkpoint of ``step`` is committed: its batches are safe."""

    @abstractmethod
    def export(self, model: Callable[[], Qwen], final: Path, tokenizer_dir: Path) -> None:
        """Writes the trained policy ``model()`` as a Hugging Face checkpoint in ``final``."""

    @abstractmethod
    def close(self) -> None:
        """Closes the metrics writers and the judge, and stops renewing leases."""


class LeaderDuties(TrainerDuties):
    """Process 0's duties: prompts and the controller, the store, evaluation, metrics.

    Args:
        config: the run config.
        config_dir: where the config's relative paths start.
        run_dir: the run directory.
        registry: the installed plugins (the judge).
        transport: the run's store and queues.
        tokenizer: encodes prompts and decodes completions for the judge.
        resumed_from: the checkpoint step the run resumes from; -1 when it resumes a run
            that committed none (it starts over); None: a fresh run.
        progress: show the progress display.
    """

    def __init__(
        self,
        config: RunConfigBase,
        *,
        config_dir: Path,
        run_dir: Path,
        registry: Registry,
        transport: Transport,
        tokenizer: Tokenizer,
        resumed_from: int | None,
        progress: bool,
        tools: Sequence[dict] = (),
    ) -> None:
        self._run_dir = run_dir
        self._eval_config = config
        self.mixture, next_prompt = components.train_prompts(config, config_dir, tokenizer,
                                                             tools=tools)  # fmt: skip
        self.judge = components.build_judge(registry, config, run_dir)
        self.store = transport.parameter_store()
        self.controller = Controller(
            next_prompt,
            prompts=transport.queue(queues.PROMPTS),
            rollouts=transport.queue(queues.ROLLOUTS),
            to_verify=transport.queue(queues.TO_VERIFY)
            if components.judged_by_stage(config)
            else None,
            rollout=config.rollout,
            staleness=config.staleness,
            algorithm=config.algorithm,
        )
        self._covered: dict[int, list[str]] = {}  # checkpoint step → the groups it covers
        self.metrics = MetricsLog(
            run_dir,
            resume_from_step=resumed_from,
            wandb=config.metrics.wandb,
            run_config=config.model_dump(mode="json"),
        )
        self.evaluator: Evaluator | None = None
        self.evaluator_without_tools: Evaluator | None = None
        self.progress = StepProgress(config.trainer.total_steps, enabled=progress)

    def evaluate_with(
        self,
        model: Qwen,
        tokenizer: Tokenizer,
        prompts: list[components.Prompt],
        environment: Environment | None = None,
    ) -> None:
        """Evaluates on ``prompts`` from now on, sampling with (a copy of) ``model``, in
        ``environment`` (the run's, for a multi-turn one)."""
        config = self._eval_config

        def evaluator(environment: Environment | None) -> Evaluator:
            return Evaluator(
                model,
                tokenizer=tokenizer,
                judge=self.judge,
                prompts=prompts,
                config=config.eval,
                rollout=config.rollout,
                stop_token_ids=components.stop_token_ids(tokenizer),
                seed=config.run.seed,
                environment=environment,
            )

        self.evaluator = evaluator(environment)
        if config.eval.without_tools:
            if environment is None or not environment.multi_turn:
                raise ConfigError("eval.without_tools compares with the environment's turns "
                                  "answered, but it answers none: set environment")  # fmt: skip
            self.evaluator_without_tools = evaluator(None)

    def newest_published(self) -> int | None:
        latest = self.store.latest()
        return None if latest is None else latest.version

    def batch_source(self, version: int) -> WaitForBatch:
        controller = self.controller

        def wait_for_batch(should_stop: Callable[[], bool]) -> list[RolloutGroup] | None:
            return controller.next_batch(version, should_stop=should_stop)

        return wait_for_batch

    def publish(self, version: int, params: Mapping[str, Any], step: int) -> None:
        self.store.publish(version, params, {"step": step})

    def batch_metrics(self, groups: list[RolloutGroup], version: int) -> dict[str, float]:
        return self.controller.staleness_metrics(groups, version)

    def evaluate(self, policy: Callable[[], Qwen]) -> dict[str, float]:
        if self.evaluator is None:
            return {}
        n = self._eval_config.eval.samples_per_prompt
        samples = f"{self.evaluator.num_prompts} prompts × {n} samples"
        with self.progress.evaluating(samples):
            model = policy()
            metrics = self.evaluator.run(model)
        if self.evaluator_without_tools is not None:
            with self.progress.evaluating(f"{samples}, the tools unanswered"):
                alone = self.evaluator_without_tools.run(model)
            metrics.update(
                {f"eval_without_tools/{k.split('/', 1)[1]}": v for k, v in alone.items()}
            )
        return metrics

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if step > 0:
            metrics.update(self.controller.accounting.as_metrics())
            # The workers' engines, as their status files last said.
            metrics.update(engine_metrics(list(read_statuses(self._run_dir).values())))
        self.metrics.write(step, metrics)

    def report(self, name: str, fields: dict[str, Any]) -> None:
        write_status(self._run_dir, name, {"role": "trainer", **fields})

    def checkpoint_state(self, step: int) -> dict[str, Any]:
        self._covered[step] = sorted(self.controller.held)
        return {"mixture": self.mixture.state(), "controller": self.controller.state()}

    def restore(self, meta: Mapping[str, Any]) -> None:
        self.mixture.restore(meta["mixture"])
        self.controller.restore(meta["controller"])

    def checkpointed(self, step: int) -> None:
        self.controller.acknowledge_trained(self._covered.pop(step, []))
        try:  # a run directory in a bucket gets the steps up to the checkpoint now
            self.metrics.sync()
        except OSError as exc:  # uploaded again after the next step
            log.warning("uploading the metrics to %s failed: %s", self._run_dir, exc)

    def export(self, model: Callable[[], Qwen], final: Path, tokenizer_dir: Path) -> None:
        save_pretrained(model(), final)
        for name in (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE):
            source = tokenizer_dir / name
            if source.exists():  # either may be in a bucket
                (final / name).write_bytes(source.read_bytes())

    def close(self) -> None:
        self.controller.close()
        self.metrics.close()
        self.judge.close()  # its worker processes or sandbox pool


class FollowerDuties(TrainerDuties):
    """The duties of a process other than the leader: none (it trains what it is sent)."""

    def __init__(self) -> None:
        self.progress = StepProgress(0, enabled=False)

    def newest_published(self) -> int | None:
        return None  # the leader's answer is shared with every process

    def batch_source(self, version: int) -> None:
        return None

    def publish(self, version: int, params: Mapping[str, Any], step: int) -> None:
        return None

    def batch_metrics(self, groups: list[RolloutGroup], version: int) -> dict[str, float]:
        return {}

    def evaluate(self, policy: Callable[[], Qwen]) -> dict[str, float]:
        return {}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        return None

    def report(self, name: str, fields: dict[str, Any]) -> None:
        return None

    def checkpoint_state(self, step: int) -> dict[str, Any]:
        return {}  # the leader's JSON is the checkpoint's

    def restore(self, meta: Mapping[str, Any]) -> None:
        return None

    def checkpointed(self, step: int) -> None:
        return None

    def export(self, model: Callable[[], Qwen], final: Path, tokenizer_dir: Path) -> None:
        return None

    def close(self) -> None:
        return None
