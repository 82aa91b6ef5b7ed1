"""The ``rlax`` command: one subcommand per module, errors as one message and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlax_core import __version__
from rlax_core.cli import (
    bench_cmd,
    config_cmd,
    plot_cmd,
    plugins_cmd,
    serve_cmd,
    train_cmd,
    verify_cmd,
)
from rlax_core.errors import NotBuiltError, RlaxError

# Subcommands whose implementation lands with a later part of RLAX.
_NOT_BUILT = {
    "launch": "start a run as processes or render its manifests (arrives with the launchers)",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlax`` and all its subcommands."""
    parser = argparse.ArgumentParser(
        prog="rlax",
        description="RLAX: distributed, preemptible reinforcement learning of LLMs in JAX.",
    )
    parser.add_argument("--version", action="version", version=f"rlax {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in _NOT_BUILT.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        sub.set_defaults(handler=_not_built(name, help_text))
    plugins_cmd.add_parser(commands)
    config_cmd.add_parser(commands)
    bench_cmd.add_parser(commands)
    verify_cmd.add_parser(commands)
    serve_cmd.add_parser(commands)
    train_cmd.add_parser(commands)
    plot_cmd.add_parser(commands)
    return parser


def _not_built(name: str, what: str):
    def handler(args: argparse.Namespace) -> int:
        raise NotBuiltError(f"`rlax {name}` is not built yet in rlax {__version__}: it will {what}")

    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the exit status (0 ok, 1 failure, 2 bad input, 3 not built)."""
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
