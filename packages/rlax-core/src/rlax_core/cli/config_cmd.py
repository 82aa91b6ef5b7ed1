"""``rlax config schema`` and ``rlax config check FILE``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, parse_overrides
from rlax_core.config.run_config import run_config_model
from rlax_core.plugins.manager import load_registry


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``config`` subcommand and its actions."""
    sub = commands.add_parser(
        "config", help="run-config schema and validation", description="Run-config tools."
    )
    actions = sub.add_subparsers(dest="action", metavar="ACTION", required=True)
    schema = actions.add_parser(
        "schema", help="print the JSON schema of run configs (with installed plugins)"
    )
    schema.set_defaults(handler=run_schema)
    check = actions.add_parser(
        "check",
        help="validate a run config and check what it names: datasets, checkpoint, tokenizer, mesh",
    )
    check.add_argument("file", help="YAML run config")
    add_set_argument(check)
    check.set_defaults(handler=run_check)


def run_schema(args: argparse.Namespace) -> int:
    """Prints the JSON schema of the RunConfig model for the installed plugins."""
    model = run_config_model(load_registry())
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Validates a file; errors raise ConfigError (exit 2)."""
    config = load_run_config(args.file, overrides=parse_overrides(args.overrides))
    from rlax_core.rl.roles.preflight import check_before_starting  # imports JAX

    # A run placed by a launcher has its devices on other machines.
    check_before_starting(
        config, Path(args.file).resolve().parent, args.file, devices=config.launcher is None
    )
    plugins = [f"transport={config.transport.type}"]
    if config.verifier is not None:
        plugins.append(f"judge={config.verifier.judge.type}")
        if config.verifier.sandbox is not None:
            plugins.append(f"sandbox={config.verifier.sandbox.type}")
    plugins.append(f"environment={config.environment.type}")
    registry = load_registry()
    for spec in getattr(config.environment, "tools", None) or ():
        plugins.append(f"tool={registry.plugin_config('tool', spec).type}")
    datasets = [*config.data.train, config.data.eval] if config.data is not None else []
    for dataset in (d for d in datasets if d is not None and d.source is not None):
        plugins.append(
            f"prompt_source={registry.plugin_config('prompt_source', dataset.source).type}"
        )
    if config.launcher is not None:
        plugins.append(f"launcher={config.launcher.type}")
    print(f"{args.file}: valid run config ({', '.join(plugins)})")
    return 0
