"""The ``rlax`` command: one subcommand per module, errors as one message and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlax_core import __version__
from rlax_core.cli import (
    bench_cmd,
    config_cmd,
    launch_cmd,
    plot_cmd,
    plugins_cmd,
    preempt_cmd,
    serve_cmd,
    status_cmd,
    train_cmd,
    verify_cmd,
)
from rlax_core.errors import RlaxError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlax`` and all its subcommands."""
    parser = argparse.ArgumentParser(
        prog="rlax",
        description="RLAX: distributed, preemptible reinforcement learning of LLMs in JAX.",
    )
    parser.add_argument("--version", action="version", version=f"rlax {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plugins_cmd.add_parser(commands)
    config_cmd.add_parser(commands)
    bench_cmd.add_parser(commands)
    verify_cmd.add_parser(commands)
    serve_cmd.add_parser(commands)
    launch_cmd.add_parser(commands)
    train_cmd.add_parser(commands)
    plot_cmd.add_parser(commands)
    status_cmd.add_parser(commands)
    preempt_cmd.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status (0 ok, 1 failure, 2 bad input, 128+n on signal n)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except RlaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    """The console-script entry point."""
    sys.exit(main())
