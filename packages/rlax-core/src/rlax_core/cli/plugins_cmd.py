"""``rlax plugins``: what is installed, by kind, name, package and version."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from rlax_core.plugins.manager import load_registry


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``plugins`` subcommand."""
    sub = commands.add_parser(
        "plugins", help="list installed plugins", description="List installed plugins."
    )
    sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Prints every registration, and packages that registered nothing."""
    registry = load_registry()
    rows = [
        {
            "kind": r.kind,
            "name": r.name,
            "package": r.package,
            "version": r.version,
            "description": r.summary,
        }
        for r in registry.all()
    ]
    if args.json:
        print(json.dumps({"plugins": rows, "packages": registry.loaded_packages}, indent=2))
        return 0
    table = Table(title="RLAX plugins")
    for column in ("kind", "name", "package", "version", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(row[c] for c in ("kind", "name", "package", "version", "description")))
    console = Console()
    console.print(table)
    idle = sorted(set(registry.loaded_packages) - {r["package"] for r in rows})
    if idle:
        console.print(f"loaded, registering nothing: {', '.join(idle)}")
    return 0
