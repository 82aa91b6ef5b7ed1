"""The processes of a run: everything in one process, the trainer, a worker or a verifier.

``rlax train`` dispatches here. Every role builds its parts from the same config, so a
run split over processes trains exactly what the embedded run trains.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import jax

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.environment import Environment
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.plugins.manager import load_registry
from rlax_core.rl.roles import components, queues
from rlax_core.rl.roles.loop import LeasingLoop
from rlax_core.rl.roles.streaming_worker import StreamingWorker
from rlax_core.rl.roles.trainer import TrainerRun
from rlax_core.rl.roles.verifier import verifier_of
from rlax_core.rl.roles.worker import InferenceWorker, RolloutWorker
from rlax_core.run_dir.layout import default_run_dir
from rlax_core.run_dir.status import write_status

STATUS_EVERY_S = 5.0


def run_all(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: str | Path | None,
    *,
    resume: bool,
    stop: threading.Event,
    progress: bool = True,
) -> bool:
    """The embedded run: the trainer, ``rollout.workers`` worker threads and, with the
    verifier stage, ``verifier.workers`` verifier threads, in this process."""
    registry = load_registry()
    run_dir = default_run_dir(config, run_dir)
    transport = components.build_transport(registry, config, run_dir)
    trainer = TrainerRun(config, config_dir=config_dir, run_dir=run_dir, registry=registry,
                         transport=transport, resume=resume, progress=progress)  # fmt: skip
    failures: list[BaseException] = []

    def fail(exc: BaseException) -> None:
        failures.append(exc)
        stop.set()

    judge = trainer.judge
    assert judge is not None, "the embedded run's trainer is its own leader"
    staged = components.judged_by_stage(config)
    environments = [components.build_environment(registry, config, run_dir)
                    for _ in range(config.rollout.workers)]  # fmt: skip
    workers = [
        _worker(f"worker-{i}", config, trainer.worker_model(), trainer.tokenizer,
                None if staged else judge, transport, environment)
        for i, environment in enumerate(environments)
    ]  # fmt: skip
    loops: list[LeasingLoop] = list(workers)
    if staged:
        assert config.verifier is not None
        loops += [verifier_of(f"verifier-{i}", config, judge, trainer.tokenizer, transport)
                  for i in range(config.verifier.workers)]  # fmt: skip
    threads = [threading.Thread(target=_report_worker, args=(w, run_dir, stop), daemon=True)
               for w in workers]  # fmt: skip
    for thread in threads:
        thread.start()
    for loop in loops:
        thread = threading.Thread(target=loop.run, args=(stop, fail), name=loop.name, daemon=True)
        thread.start()
        threads.append(thread)
    try:
        finished = trainer.run(stop)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for environment in environments:
            environment.close()
        trainer.close()
        transport.close()
    if failures:
        raise failures[0]
    return finished


def run_trainer(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: str | Path | None,
    *,
    resume: bool,
    stop: threading.Event,
    progress: bool = True,
) -> bool:
    """The trainer process of a multi-process run (workers are other processes).

    ``--resume`` is implied: a trainer restarted by its launcher after a crash or a
    preemption continues from the newest checkpoint in ``run_dir`` (if the config is
    unchanged in what it trains; otherwise the run directory refuses it). Under
    ``jax.distributed`` this is one of the trainer's processes; only the leader
    (process 0) connects to the transport (see :mod:`rlax_core.rl.roles.trainer_processes`).
    """
    del resume  # always resumes when there is a checkpoint (see above)
    registry = load_registry()
    run_dir = default_run_dir(config, run_dir)
    transport = None
    if jax.process_index() == 0:
        transport = components.build_transport(registry, config, run_dir)
    trainer = TrainerRun(config, config_dir=config_dir, run_dir=run_dir, registry=registry,
                         transport=transport, resume=True, progress=progress)  # fmt: skip
    try:
        return trainer.run(stop)
    finally:
        trainer.close()
        if transport is not None:
            transport.close()


def run_worker(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: str | Path | None,
    *,
    worker_id: str,
    stop: threading.Event,
    working: threading.Event | None = None,
) -> None:
    """One inference worker process; runs until ``stop`` (SIGTERM) or the transport closes.

    ``working`` is set when the worker starts leasing prompts: before that it holds
    nothing, so a signal during start-up may end the process at once.
    """
    registry = load_registry()
    run_dir = default_run_dir(config, run_dir)
    components.require_networked_transport("worker", config)
    transport = components.build_transport(registry, config, run_dir)
    judge = None
    if not components.judged_by_stage(config):
        judge = components.build_judge(registry, config, run_dir)
    model = components.build_model(config, config_dir)
    tokenizer = components.load_tokenizer(config, config_dir)
    components.check_vocabulary(model.config.vocab_size, tokenizer)
    environment = components.build_environment(registry, config, run_dir)
    worker = _worker(worker_id, config, model, tokenizer, judge, transport, environment)
    reporter = threading.Thread(target=_report_worker, args=(worker, run_dir, stop), daemon=True)
    reporter.start()
    if working is not None:
        working.set()
    try:
        worker.run(stop)
    finally:
        environment.close()
        if judge is not None:
            judge.close()
        transport.close()


def _worker(
    worker_id: str,
    config: RunConfigBase,
    model: Qwen,
    tokenizer: Tokenizer,
    judge: Judge | None,
    transport: Transport,
    environment: Environment,
) -> RolloutWorker:
    """An inference worker of the run on ``transport``; ``judge`` None: the stage judges.
    A streaming worker with ``rollout.engine.kind: paged`` (and with ``environment``,
    which may answer the model's turns)."""
    parts: dict[str, Any] = {}
    if config.rollout.engine.kind == "paged":
        kind: type[RolloutWorker] = StreamingWorker
        parts["environment"] = environment
    elif environment.multi_turn:
        raise ConfigError(
            f"the {config.environment.type!r} environment answers the model's turns, which "
            "needs the rollout engine: set rollout.engine.kind: paged"
        )
    else:
        kind = InferenceWorker
    return kind(
        worker_id,
        **parts,
        model=model,
        tokenizer=tokenizer,
        judge=judge,
        store=transport.parameter_store(),
        prompts=transport.queue(queues.PROMPTS),
        outbox=transport.queue(queues.ROLLOUTS if judge is not None else queues.TO_VERIFY),
        rollout=config.rollout,
        staleness=config.staleness,
        seed=config.run.seed,
        stop_token_ids=components.stop_token_ids(tokenizer),
    )


def _report_worker(worker: RolloutWorker, run_dir: Path, stop: threading.Event) -> None:
    """Writes the worker's status file now, every few seconds, and once more at the end."""
    while True:
        write_status(run_dir, worker.worker_id, worker.status())
        if stop.wait(STATUS_EVERY_S):
            break
    write_status(run_dir, worker.worker_id, worker.status())
