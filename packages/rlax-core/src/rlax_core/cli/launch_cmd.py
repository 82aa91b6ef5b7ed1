"""``rlax launch CONFIG``: place a run with the launcher its config names.

The launcher comes from the plugin registry (``launcher: {type: ...}``), so core starts a
TPU VM or GKE run without importing either. A launcher that creates cloud resources only
renders them unless ``--apply`` is given; ``--dry-run`` renders with any launcher.

Rendered artifacts print as what they are: Kubernetes manifests as one multi-document
YAML stream (``kubectl apply -f -`` reads it), commands and scripts as a shell script
that writes each script to the file its commands read, then runs the commands.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from rlax_core.config.launch_checks import cloud_launch_problems
from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, parse_overrides, write_overridden
from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.launcher import Launcher, RenderedArtifact
from rlax_core.errors import ConfigError
from rlax_core.plugins.manager import load_registry
from rlax_core.plugins.registry import BuildContext

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
        "--run-dir",
        type=Path,
        help="local directory for the launcher's files (default: run.run_dir when it is a "
        "local path, else runs/<run.name>)",
    )
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Builds the launcher and renders, launches, reports or stops."""
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
    launcher.launch(run_config, run_dir)
    return 0


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
