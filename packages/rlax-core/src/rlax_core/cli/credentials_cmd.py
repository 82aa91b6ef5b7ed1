"""``rlax credentials DIR``: a run's transport credentials, a folder per role.

What a launcher makes for each run, for users who place the processes themselves: every
role's credential, the CA and a client certificate (mutual TLS), the server's
certificate and the roles' credentials it checks, and the key pair that signs weights
(see :mod:`rlax_core.transport.credentials`). It prints the transport settings that
read them, as each role mounts its folder at the same path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from rlax_core.transport.credentials import (
    MOUNT_DIR,
    ROLES,
    generate_run_credentials,
    transport_settings,
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``credentials`` subcommand."""
    sub = commands.add_parser(
        "credentials",
        help="make a run's transport credentials: one per role, TLS and the weight-signing keys",
        description="Write a run's transport credentials into DIR: DIR/trainer, DIR/worker and "
        "DIR/verifier hold what each role's processes mount, DIR/server what the transport "
        f"server mounts (each at {MOUNT_DIR}); DIR/ca-key.pem stays with you.",
    )
    sub.add_argument("folder", type=Path, help="where to write them (must not hold any yet)")
    sub.add_argument(
        "--server-host",
        action="append",
        required=True,
        dest="server_hosts",
        help="a DNS name or IP clients reach the transport server at (repeat for several)",
    )
    sub.add_argument("--valid-days", type=int, default=365, help="certificate lifetime")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Writes the folders and prints the settings that use them."""
    made = generate_run_credentials(args.folder, args.server_hosts, valid_days=args.valid_days)
    print(f"wrote the credentials of {', '.join(ROLES)} and the server to {made.folder}",
          file=sys.stderr)  # fmt: skip
    print(
        f"# Mount {made.folder}/ROLE at {MOUNT_DIR} in each role's processes and "
        f"{made.server} at {MOUNT_DIR} in the server's (signing-key.pem is in the trainer's "
        "folder alone); then, in the run config:"
    )
    print(yaml.safe_dump({"transport": transport_settings()}, sort_keys=False), end="")
    return 0
