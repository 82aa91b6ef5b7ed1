"""``rlax train CONFIG``: run RL, in one process or as one role of a multi-process run."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import NoReturn

from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, parse_overrides
from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.run_dir.layout import default_run_dir, resumable
from rlax_core.run_dir.status import describe_run, run_progress

# A trainer process that stopped because a peer was terminated: not a success (a
# supervisor must restart it with its peers: all of a trainer's processes start
# together), unlike 128 + SIGTERM, the exit of the process that was itself asked to stop.
PEER_STOPPED = 75  # EX_TEMPFAIL


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``train`` subcommand."""
    sub = commands.add_parser(
        "train",
        help="run RL on a run config",
        description="Run asynchronous, staleness-bounded RL. Without --role, everything "
        "runs in this process (the embedded run). Ctrl-C stops after the current step "
        "with a checkpoint; --resume continues.",
    )
    sub.add_argument("config", type=Path, help="YAML run config")
    sub.add_argument(
        "--run-dir",
        help="run directory: local, gs://… or s3://… (default: run.run_dir, else runs/<run.name>)",
    )
    sub.add_argument("--resume", action="store_true", help="continue the run in the run directory")
    add_set_argument(sub)
    sub.add_argument("--role", choices=["all", "trainer", "worker", "verifier"], default="all",
                     help="this process's part of a multi-process run")  # fmt: skip
    sub.add_argument("--worker-id", default="worker-0", help="name of this worker (--role worker)")
    sub.add_argument(
        "--verifier-id", default="verifier-0", help="name of this verifier (--role verifier)"
    )
    sub.add_argument(
        "--coordinator", help="jax.distributed coordinator HOST:PORT (multi-host trainer)"
    )
    sub.add_argument("--num-processes", type=int, help="jax.distributed process count")
    sub.add_argument("--process-id", type=int, help="jax.distributed process id")
    sub.add_argument("--no-progress", action="store_true", help="no progress display")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Loads the config, installs signal handlers and runs the role; 130 when stopped."""
    config = load_run_config(args.config, overrides=parse_overrides(args.overrides))
    if args.resume and args.role == "all":
        finished_at = resumable(default_run_dir(config, args.run_dir), config,
                                args.config.resolve().parent)  # fmt: skip
        if finished_at is not None:
            print(
                f"rlax train: the run in {default_run_dir(config, args.run_dir)} finished at "
                f"step {finished_at}; nothing to resume (to train on, raise the step budget: "
                f"--set trainer.total_steps={2 * config.trainer.total_steps})",
                file=sys.stderr,
            )
            return 0
    distributed = (args.coordinator, args.num_processes, args.process_id)
    if any(v is not None for v in distributed):
        if None in distributed:
            raise ConfigError("--coordinator, --num-processes and --process-id go together")
        if args.role != "trainer":
            raise ConfigError("--coordinator is for the trainer's processes: add --role trainer")
        import jax

        # CPU hosts need a collectives backend for cross-process reductions (TPU and GPU
        # bring their own); it has to be chosen before the backend starts.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
    if args.role == "verifier":  # it needs no JAX: start it without importing it
        from rlax_core.rl.roles.verifier import run_verifier
    else:
        from rlax_core.rl.roles import start  # imports JAX: after the config is known valid
        from rlax_core.rl.roles.preflight import check_before_starting

        check_before_starting(config, args.config.resolve().parent, str(args.config),
                              devices=args.role in ("all", "trainer"))  # fmt: skip

    stop = threading.Event()
    stopped_by_signal: list[int] = []
    # A worker or verifier that has not leased anything yet holds nothing: a signal during
    # its start-up (imports, model, transport; seconds to tens of seconds) ends it at once
    # rather than after it. Other roles write state while starting and stop cleanly.
    working = threading.Event() if args.role in ("worker", "verifier") else None

    def on_signal(signum: int, _frame: object) -> None:
        stopped_by_signal.append(signum)
        stop.set()
        if working is not None and not working.is_set():
            print(f"stopped by {signal.Signals(signum).name} while starting", file=sys.stderr)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    print(f"rlax train: starting {_starting(args, config)}", file=sys.stderr, flush=True)
    config_dir = args.config.resolve().parent
    progress = not args.no_progress
    finished = None
    if args.role == "worker":
        start.run_worker(config, config_dir, args.run_dir, worker_id=args.worker_id, stop=stop,
                         working=working)  # fmt: skip
    elif args.role == "verifier":
        run_verifier(config, config_dir, args.run_dir, verifier_id=args.verifier_id, stop=stop,
                     working=working)  # fmt: skip
    elif args.role == "trainer":
        try:
            finished = start.run_trainer(config, config_dir, args.run_dir, resume=args.resume,
                                         stop=stop, progress=progress)  # fmt: skip
        except Exception as exc:
            if args.coordinator is not None:
                _leave_multihost_trainer(exc)
            raise
        if not finished and not stopped_by_signal:
            # Only a multi-host trainer stops unasked: another of its processes was
            # terminated, and this one checkpointed and stopped with it.
            print(
                "stopped: another process of the trainer was terminated; exit "
                f"{PEER_STOPPED} asks this one's supervisor to start it again, so that it "
                "rejoins its peers when they restart",
                file=sys.stderr,
            )
            return PEER_STOPPED
    else:
        finished = start.run_all(config, config_dir, args.run_dir, resume=args.resume, stop=stop,
                                 progress=progress)  # fmt: skip
    if finished is not None and args.process_id in (None, 0):  # the trainer's leader
        run_dir = default_run_dir(config, args.run_dir)
        ended = run_progress(run_dir)
        if ended is not None:
            print("\n".join(describe_run(run_dir, ended)), flush=True)
    if stopped_by_signal:
        return 128 + stopped_by_signal[0]
    return 0


def _starting(args: argparse.Namespace, config: RunConfigBase) -> str:
    """What this process runs, in words: ``the embedded run: the trainer, 2 workers, 1
    verifier`` (the counts from the config), ``the trainer``, ``worker w0``."""
    if args.role == "worker":
        return f"worker {args.worker_id}"
    if args.role == "verifier":
        return f"verifier {args.verifier_id}"
    if args.role == "trainer":
        if args.num_processes is not None:
            return f"the trainer (process {args.process_id} of {args.num_processes})"
        return "the trainer"
    workers = config.rollout.workers
    parts = ["the trainer", f"{workers} worker{'s' if workers > 1 else ''}"]
    if config.verifier is not None and config.verifier.placement == "stage":
        verifiers = config.verifier.workers
        parts.append(f"{verifiers} verifier{'s' if verifiers > 1 else ''}")
    else:
        parts[-1] += " (judging its own rollouts)" if workers == 1 else " (each judging its own)"
    return "the embedded run: " + ", ".join(parts)


def _leave_multihost_trainer(exc: Exception) -> NoReturn:
    """Exits at once when a process of a multi-host trainer fails (e.g. a peer died).

    ``jax.distributed`` would otherwise wait at its shutdown barrier for the dead peer
    until the heartbeat timeout (100 s) and then abort. Nothing is lost by leaving: the
    checkpoints are written collectively, so the newest complete one is what a restart of
    all the trainer's processes resumes from.
    """
    if isinstance(exc, RlaxError):
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    else:
        traceback.print_exc()
        print(
            "error: this process of the multi-host trainer failed (when another of its "
            "processes dies, the others fail in their next collective); restart all of "
            "the trainer's processes: they resume from the last checkpoint",
            file=sys.stderr,
        )
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
