"""``rlax launch CONFIG``: place a run with the launcher its config names.

The launcher comes from the plugin registry (``launcher: {type: ...}``), so core starts a
TPU VM or GKE run without importing either. A launcher that creates cloud resources only
renders them unless ``--apply`` is given; ``--dry-run`` renders with any launcher.

Rendered artifacts print as what they are: Kubernetes manifests as one multi-document
YAML stream (``kubectl apply -f -`` reads it), commands and scripts as a shell script
that writes each script to the file its commands read, then runs the commands.

``--apply --watch`` recovers a cloud run without a person: it applies again every
``--watch-interval-s`` seconds (a cloud launcher's apply is idempotent and recreates what
was preempted), and prints each round's repairs, until the run has ended (its trainer's
status file in the run directory says it reached ``trainer.total_steps`` and the final
policy is exported: :func:`run_finished`) or until SIGINT or SIGTERM. A round that fails
after the first (gcloud or the API briefly unreachable) is reported and tried again the
next round; the first round's errors end the command, as a plain ``--apply``'s do.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from rlax_core.config.launch_checks import cloud_launch_problems
from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, parse_overrides, write_overridden
from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.launcher import Launcher, RenderedArtifact
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.plugins.manager import load_registry
from rlax_core.plugins.registry import BuildContext
from rlax_core.run_dir.status import STATUS_DIR, reached_the_end
from rlax_core.storage import AnyPath, storage_path

_SCRIPT_END = "RLAX_SCRIPT_END"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``launch`` subcommand."""
    sub = commands.add_parser(
        "launch",
        help="start a run as processes or on a cluster, or render what that would create",
        description="Place a run with the launcher named in its config (launcher: {type: ...}). "
        "Launchers that create cloud resources (tpu-vm, gke) only print what they would "
        "create unless --apply is given.",
    )
    sub.add_argument("config", type=Path, help="YAML run config with a launcher section")
    action = sub.add_mutually_exclusive_group()
    action.add_argument(
        "--dry-run", action="store_true", help="print the commands or manifests; run nothing"
    )
    action.add_argument(
        "--apply", action="store_true", help="create the cloud resources (cloud launchers)"
    )
    action.add_argument(
        "--status", action="store_true", help="print the state of the run's processes"
    )
    action.add_argument(
        "--stop", action="store_true", help="stop and delete everything the launcher started"
    )
    add_set_argument(sub)
    sub.add_argument(
        "--skip-checks",
        action="store_true",
        help="with --apply: do not read the datasets, checkpoint and tokenizer first (for "
        "a bucket this machine cannot read)",
    )
    sub.add_argument(
        "--watch",
        action="store_true",
        help="with --apply: keep applying every --watch-interval-s seconds, recreating what "
        "was preempted, until the run has finished (or SIGINT/SIGTERM)",
    )
    sub.add_argument(
        "--watch-interval-s",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="with --watch: seconds between rounds (default: 120)",
    )
    sub.add_argument(
        "--run-dir",
        type=Path,
        help="local directory for the launcher's files (default: run.run_dir when it is a "
        "local path, else runs/<run.name>)",
    )
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Builds the launcher and renders, launches, reports or stops."""
    if args.watch and not args.apply:
        raise ConfigError("--watch keeps re-applying a run: give it with --apply")
    if args.watch_interval_s <= 0:
        raise ConfigError(f"--watch-interval-s must be positive, not {args.watch_interval_s:g}")
    registry = load_registry()
    overrides = parse_overrides(args.overrides)
    run_config = load_run_config(args.config, registry, overrides=overrides)
    # The launcher's processes read the config by file name: one with the overrides in it.
    config_path = write_overridden(args.config, overrides) if overrides else args.config.resolve()
    if run_config.launcher is None:
        installed = ", ".join(registry.names("launcher")) or "none installed"
        raise ConfigError(
            f"{args.config} has no launcher section, so it runs embedded in one process: use "
            f"`rlax train {args.config}`, or add launcher: {{type: NAME}} to place it "
            f"(launchers: {installed})"
        )
    run_dir = args.run_dir or local_run_dir(run_config)
    context = BuildContext(
        registry, run_config=run_config, run_dir=run_dir, config_path=config_path
    )
    launcher: Launcher = registry.build("launcher", run_config.launcher, context)
    if args.status:
        print_status(launcher, run_dir)
        return 0
    if args.stop:
        launcher.stop(run_dir)
        print(f"stopped run {run_config.run.name}", file=sys.stderr)
        return 0
    if launcher.creates_cloud_resources:
        problems = cloud_launch_problems(run_config, creating=args.apply and not args.dry_run)
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            raise ConfigError(
                f"{args.config} would not train on {run_config.launcher.type} as it stands "
                f"({len(problems)} problem{'s' if len(problems) > 1 else ''}); nothing was "
                f"created:\n{listed}"
            )
        if args.apply and not args.skip_checks:
            from rlax_core.rl.roles.preflight import check_before_starting  # imports JAX

            check_before_starting(
                run_config,
                args.config.resolve().parent,
                f"{args.config} (--skip-checks to launch without reading them)",
                devices=False,
            )
    if args.dry_run or (launcher.creates_cloud_resources and not args.apply):
        sys.stdout.write(format_artifacts(launcher.render(run_config, run_dir)))
        if not args.dry_run:
            print(
                f"nothing was created: the {run_config.launcher.type} launcher creates cloud "
                f"resources; run `rlax launch {args.config} --apply` to create them",
                file=sys.stderr,
            )
        return 0
    if args.watch:
        if not launcher.creates_cloud_resources:
            raise ConfigError(
                f"--watch re-applies a cloud launcher; the {run_config.launcher.type} launcher "
                "supervises and restarts its processes itself: drop --watch"
            )
        return watch(launcher, run_config, run_dir, args.watch_interval_s, args.config)
    launcher.launch(run_config, run_dir)
    return 0


def watch(
    launcher: Launcher,
    run_config: RunConfigBase,
    run_dir: Path,
    interval_s: float,
    config_path: Path,
) -> int:
    """Applies the run every ``interval_s`` seconds until it has finished or a signal comes.

    Args:
        launcher: a launcher whose :meth:`~Launcher.launch` is idempotent and repairs.
        run_config: the run.
        run_dir: the local folder of the launcher's files.
        interval_s: seconds from the end of one round to the start of the next.
        config_path: the config file, as the user named it (for the messages).

    Returns:
        0 once the run has finished; 128 + the signal's number after SIGINT or SIGTERM
        (the run goes on without the watch).

    Raises:
        RlaxError: the first round failed.
    """
    shared = shared_run_dir(run_config, run_dir)
    total = run_config.trainer.total_steps
    name = run_config.run.name
    stopped: list[int] = []
    wake = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopped.append(signum)
        wake.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        round_ = 0
        while not stopped:
            if _finished(shared, total):
                print(f"run {name} has finished (step {total}, final policy in {shared})")
                return 0
            round_ += 1
            now = time.strftime("%H:%M:%S")
            print(f"watch round {round_} ({now}): applying run {name}", file=sys.stderr)
            try:
                launcher.launch(run_config, run_dir)
            except RlaxError as exc:
                if round_ == 1 and not stopped:
                    raise
                print(f"warning: round {round_} failed: {exc}", file=sys.stderr)
            if not stopped:
                print(f"next round in {interval_s:g}s", file=sys.stderr, flush=True)
                wake.wait(interval_s)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    signum = stopped[0]
    print(
        f"stopped watching ({signal.Signals(signum).name}); run {name} goes on "
        f"(see `rlax launch {config_path} --status`)",
        file=sys.stderr,
    )
    return 128 + signum


def shared_run_dir(run_config: RunConfigBase, run_dir: Path) -> AnyPath:
    """The run directory the run's processes write: the launcher's ``run_dir`` field
    where it has one, else ``run.run_dir``, else the local ``run_dir``."""
    configured = getattr(run_config.launcher, "run_dir", None) or run_config.run.run_dir
    return storage_path(configured) if configured else run_dir


def run_finished(run_dir: AnyPath, total_steps: int) -> bool:
    """Whether the run in ``run_dir`` has ended: its trainer's status file
    (``status/trainer.json``) reports step ``total_steps`` or later, and the final policy
    is exported (``final/``, written after the last step).

    The status file of an earlier, shorter run in the same directory (``total_steps``
    raised since, to go on) does not count; a half-written one counts as not finished.

    Raises:
        OSError: the run directory cannot be read (e.g. a bucket without access).
    """
    path = run_dir / STATUS_DIR / "trainer.json"
    if not path.exists():
        return False
    try:
        step = json.loads(path.read_text()).get("step")
    except (json.JSONDecodeError, AttributeError):
        return False
    return isinstance(step, int) and reached_the_end(run_dir, step, total_steps)


def _finished(shared: AnyPath, total_steps: int) -> bool:
    """:func:`run_finished`, with a run directory that cannot be read reported, not fatal."""
    try:
        return run_finished(shared, total_steps)
    except Exception as exc:  # gcsfs's and s3fs's credential errors share no base class
        print(
            f"warning: cannot read {shared} to see whether the run has finished ({exc}); "
            "the watch goes on until it can, or until stopped",
            file=sys.stderr,
        )
        return False


def local_run_dir(run_config: RunConfigBase) -> Path:
    """``run.run_dir`` when it is a local path, else ``runs/<run.name>``."""
    configured = run_config.run.run_dir
    if configured and "://" not in configured:
        return Path(configured)
    return Path("runs") / run_config.run.name


def format_artifacts(artifacts: list[RenderedArtifact]) -> str:
    """Manifests alone as a YAML stream; anything else as a shell script."""
    if artifacts and all(a.kind == "manifest" for a in artifacts):
        return "".join(f"---\n{a.content.rstrip()}\n" for a in artifacts)
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    for artifact in artifacts:
        if artifact.kind == "command":
            lines.append(artifact.content)
            continue
        if _SCRIPT_END in artifact.content.splitlines():
            raise ConfigError(f"{artifact.name} contains the line {_SCRIPT_END}; it cannot print")
        parent = Path(artifact.name).parent
        if str(parent) not in ("", "."):
            lines.append(f"mkdir -p {shlex.quote(str(parent))}")
        lines += [
            f"cat > {shlex.quote(artifact.name)} <<'{_SCRIPT_END}'",
            artifact.content.rstrip("\n"),
            _SCRIPT_END,
        ]
    return "\n".join(lines) + "\n"


def print_status(launcher: Launcher, run_dir: Path) -> None:
    """One line per process: role, name, state, restarts, policy version."""
    statuses = launcher.status(run_dir)
    if not statuses:
        print("no processes")
        return
    width = max(len(s.name) for s in statuses)
    print(f"{'role':<10} {'name':<{width}} {'state':<10} restarts  version")
    for s in statuses:
        version = "-" if s.policy_version is None else str(s.policy_version)
        print(f"{s.role:<10} {s.name:<{width}} {s.state:<10} {s.restarts:>8}  {version}")
