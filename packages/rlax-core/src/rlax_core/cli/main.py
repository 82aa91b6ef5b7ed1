"""The ``rlax`` command: one subcommand per module, errors as one message and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rlax_core import __version__
from rlax_core.cli import (
    bench_cmd,
    config_cmd,
    credentials_cmd,
    eval_cmd,
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
    credentials_cmd.add_parser(commands)
    launch_cmd.add_parser(commands)
    train_cmd.add_parser(commands)
    eval_cmd.add_parser(commands)
    plot_cmd.add_parser(commands)
    status_cmd.add_parser(commands)
    preempt_cmd.add_parser(commands)
    return parser


# The exit of a process killed by SIGPIPE (128 + 13): what `rlax … | head` reports when
# the reader left before the output ended, as for any Unix filter.
CLOSED_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status (0 ok, 1 failure, 2 bad input, 128+n on signal n).

    A reader that closes the pipe early (``rlax config schema | head -1``) ends the
    command quietly with 141, as SIGPIPE ends a C program: Python ignores SIGPIPE and
    raises BrokenPipeError from whatever write comes next, wherever that is.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        try:
            code = int(args.handler(args) or 0)
        except RlaxError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = exc.exit_code
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            code = 130
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be caught
        return code
    except BrokenPipeError:
        _silence_stdout()
        return CLOSED_PIPE


def _silence_stdout() -> None:
    """Points stdout at /dev/null: Python flushes it again at exit, and the bytes still
    buffered for the closed pipe would raise (and print) once more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to flush
        pass


def entry_point() -> None:
    """The console-script entry point."""
    sys.exit(main())
