"""The processes of a run: everything in one process, the trainer, or one worker.

``rlax train`` dispatches here. Every role builds its parts from the same config, so a
run split over processes trains exactly what the embedded run trains.
"""

from __future__ import annotations

import threading
from pathlib import Path

import jax

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import RlaxError
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.plugins.manager import load_registry
from rlax_core.rl.roles import components
from rlax_core.rl.roles.trainer import TrainerRun
from rlax_core.rl.roles.worker import InferenceWorker
from rlax_core.run_dir.layout import default_run_dir
from rlax_core.run_dir.status import write_status

STATUS_EVERY_S = 5.0


def run_all(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: Path | None,
    *,
    resume: bool,
    stop: threading.Event,
    progress: bool = True,
) -> bool:
    """The embedded run: trainer and ``rollout.workers`` worker threads in this process."""
    registry = load_registry()
    run_dir = run_dir or default_run_dir(config)
    transport = components.build_transport(registry, config, run_dir)
    trainer = TrainerRun(config, config_dir=config_dir, run_dir=run_dir, registry=registry,
                         transport=transport, resume=resume, progress=progress)  # fmt: skip
    failures: list[BaseException] = []

    def fail(exc: BaseException) -> None:
        failures.append(exc)
        stop.set()

    judge = trainer.judge
    assert judge is not None, "the embedded run's trainer is its own leader"
    threads = []
    for i in range(config.rollout.workers):
        worker = _worker(f"worker-{i}", config, trainer.worker_model(), trainer.tokenizer,
                         judge, transport)  # fmt: skip
        thread = threading.Thread(
            target=worker.run, args=(stop, fail), name=worker.worker_id, daemon=True
        )
        thread.start()
        threads.append(thread)
    try:
        finished = trainer.run(stop)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        trainer.close()
        transport.close()
    if failures:
        raise failures[0]
    return finished


def run_trainer(
    config: RunConfigBase,
    config_dir: Path,
    run_dir: Path | None,
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
    run_dir = run_dir or default_run_dir(config)
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
    run_dir: Path | None,
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
    run_dir = run_dir or default_run_dir(config)
    if config.transport.type == "inproc":
        raise RlaxError(
            "a worker process needs a networked transport (transport.type nats or grpc); "
            "with inproc, run everything in one process: rlax train CONFIG"
        )
    transport = components.build_transport(registry, config, run_dir)
    judge = components.build_judge(registry, config, run_dir)
    model = components.build_model(config, config_dir)
    tokenizer = components.load_tokenizer(config, config_dir)
    worker = _worker(worker_id, config, model, tokenizer, judge, transport)
    reporter = threading.Thread(target=_report, args=(worker, run_dir, stop), daemon=True)
    reporter.start()
    if working is not None:
        working.set()
    try:
        worker.run(stop)
    finally:
        transport.close()


def _worker(
    worker_id: str,
    config: RunConfigBase,
    model: Qwen,
    tokenizer: Tokenizer,
    judge: Judge,
    transport: Transport,
) -> InferenceWorker:
    """An inference worker of the run on ``transport`` (a thread's or a process's)."""
    return InferenceWorker(
        worker_id,
        model=model,
        tokenizer=tokenizer,
        judge=judge,
        store=transport.parameter_store(),
        prompts=transport.queue("prompts"),
        rollouts=transport.queue("rollouts"),
        rollout=config.rollout,
        staleness=config.staleness,
        seed=config.run.seed,
        stop_token_ids=components.stop_token_ids(tokenizer),
    )


def _report(worker: InferenceWorker, run_dir: Path, stop: threading.Event) -> None:
    while not stop.wait(STATUS_EVERY_S):
        rate = worker.samples_done / worker.busy_s if worker.busy_s else 0.0
        write_status(run_dir, worker.worker_id, {
            "role": "worker", "policy_version": worker.version, "groups": worker.groups_done,
            "throughput": {"samples_per_s": rate},
        })  # fmt: skip
