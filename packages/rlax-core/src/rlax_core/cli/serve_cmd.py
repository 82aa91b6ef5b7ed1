"""``rlax serve param-server``: run a networked transport's server as its own process;
``rlax serve policy``: serve a checkpoint over the OpenAI API
(:mod:`rlax_core.serve.policy_server`).

The server comes from the plugin that registered the transport (through the
``register_transport_servers`` hook), so core starts a NATS or gRPC server without
importing either. Settings come from the run config's ``transport:`` section, from
``--set key=value`` overrides, or both; the server and its clients read the same ones.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlax_core.config.loading import load_run_config
from rlax_core.config.overrides import add_set_argument, merge_overrides, parse_overrides
from rlax_core.contracts.transport import ServerSecurity, TransportServer
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.plugins.manager import load_registry
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_core.run_dir.status import write_status
from rlax_core.serve.policy_server import EngineShape, PolicyServer
from rlax_core.storage import AnyPath, storage_path

# How often the foreground loop checks that the server is still alive.
_POLL_S = 0.5
# How often a transport server of a run reports its load to the run's status files.
_STATUS_EVERY_S = 5.0


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``serve`` subcommand."""
    sub = commands.add_parser(
        "serve",
        help="run a transport's server, or serve a policy over the OpenAI API",
        description="param-server: run the server of a networked transport (settings from "
        "the run config's transport section and --set overrides). policy: serve a checkpoint "
        "directory over the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models). "
        "Both run until SIGINT or SIGTERM.",
    )
    sub.add_argument("what", choices=["param-server", "policy"], help="the server to run")
    policy = sub.add_argument_group("policy")
    policy.add_argument("--model", type=Path, help="the checkpoint directory (with its tokenizer)")
    policy.add_argument("--host", default="127.0.0.1", help="address to listen on")
    policy.add_argument("--port", type=int, default=8000, help="port to listen on (0: any)")
    policy.add_argument("--served-model-name", help="the model's name in the API")
    policy.add_argument("--slots", type=int, default=16, help="sequences decoding at once")
    policy.add_argument("--max-sequence-tokens", type=int, default=4096,
                        help="the longest prompt and completion together")  # fmt: skip
    policy.add_argument(
        "--top-logprobs",
        type=int,
        default=20,
        help="the most alternatives per token a request may ask for (0: none)",
    )
    sub.add_argument(
        "--insecure",
        action="store_true",
        help="param-server: serve a non-loopback address without authentication or TLS "
        "(a lab network you trust; anyone who reaches the port can then publish weights)",
    )
    sub.add_argument(
        "--run-dir",
        help="param-server: the run directory it reports its load to, for `rlax status` "
        "(default: the config's run.run_dir)",
    )
    sub.add_argument("--transport", help="transport type, e.g. grpc or nats")
    sub.add_argument("--config", type=Path, help="a run config whose transport section to use")
    add_set_argument(sub, "one transport setting")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Builds the server, starts it, prints its address and serves until signalled."""
    if args.what == "policy":
        server: TransportServer | PolicyServer = _policy_server(args)
    else:
        server = build_server(
            load_registry(),
            transport=args.transport,
            config_path=args.config,
            overrides=parse_overrides(args.overrides),
        )
        check_exposure(server.security(), insecure=args.insecure)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    status_dir = _status_dir(args) if isinstance(server, TransportServer) else None
    server.start()
    try:
        address = server.url if isinstance(server, PolicyServer) else server.address
        print(f"serving {args.what} at {address}", flush=True)
        reported = 0.0
        while not stop.wait(_POLL_S):
            if not server.running():
                raise RlaxError(f"the server at {address} stopped on its own; see its log")
            if status_dir is not None and time.monotonic() - reported >= _STATUS_EVERY_S:
                reported = time.monotonic()
                _report_load(status_dir, server)  # type: ignore[arg-type]
    finally:
        server.stop()
    print("stopped", file=sys.stderr, flush=True)
    return 0


def _status_dir(args: argparse.Namespace) -> AnyPath | None:
    """The run directory a transport server reports to: ``--run-dir``, else its run
    config's ``run.run_dir``; None when neither is given."""
    configured = args.run_dir
    if configured is None and args.config is not None:
        try:
            configured = (
                (yaml.safe_load(args.config.read_text()) or {}).get("run", {}).get("run_dir")
            )
        except (OSError, yaml.YAMLError, AttributeError):
            return None  # build_server has read and checked it; nothing to report to
    return storage_path(configured) if configured else None


def _report_load(run_dir: AnyPath, server: TransportServer) -> None:
    """``status/transport.json``: the server's counts, for ``rlax status``."""
    try:
        write_status(run_dir, "transport", {"role": "transport", "load": server.load()})
    except Exception as exc:
        print(f"warning: could not report the server's load to {run_dir}: {exc}", file=sys.stderr)


def check_exposure(security: ServerSecurity, *, insecure: bool) -> None:
    """Refuses a server that others can reach without credentials or TLS, unless told.

    Raises:
        ConfigError: not loopback, not both authenticated and encrypted, no ``--insecure``.
    """
    if security.safe:
        return
    missing = " and ".join(
        what
        for what, on in (("authentication", security.authenticated), ("TLS", security.encrypted))
        if not on
    )
    if not insecure:
        raise ConfigError(
            f"the server would listen on {security.host}, which other machines can reach, "
            f"without {missing}: whoever reaches it could publish the weights every worker "
            "samples with. Give each role a credential and the server a certificate "
            "(`rlax credentials DIR`; transport.credentials_file, server.credentials_dir, "
            "the TLS files), listen on 127.0.0.1, or pass --insecure on a network you trust"
        )
    print(
        f"warning: serving on {security.host} without {missing} (--insecure): anyone who "
        "reaches the port can publish weights and rollouts",
        file=sys.stderr,
        flush=True,
    )


def _policy_server(args: argparse.Namespace) -> PolicyServer:
    if args.model is None:
        raise ConfigError("rlax serve policy needs --model DIR (a checkpoint directory)")
    for name in ("slots", "max_sequence_tokens"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.top_logprobs <= 20:
        raise ConfigError("--top-logprobs must be in [0, 20]")
    shape = EngineShape(slots=args.slots, max_sequence_tokens=args.max_sequence_tokens,
                        top_logprobs=args.top_logprobs)  # fmt: skip
    return PolicyServer(args.model, host=args.host, port=args.port,
                        model_name=args.served_model_name, shape=shape)  # fmt: skip


def build_server(
    registry: Registry,
    *,
    transport: str | None,
    config_path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> TransportServer:
    """The server for a transport, configured like that transport's clients.

    Args:
        registry: the installed plugins.
        transport: the transport type; may be omitted when ``config_path`` is given.
        config_path: a run config whose ``transport`` section holds the settings.
        overrides: settings that replace those of the run config (or the defaults).

    Raises:
        ConfigError: no transport named, it needs no server, or the settings are invalid.
    """
    settings: dict[str, Any] = {}
    if config_path is not None:
        section = load_run_config(config_path, registry).transport
        settings = section.model_dump()
        if transport is not None and transport != section.type:
            raise ConfigError(
                f"--transport {transport} disagrees with transport.type {section.type!r} in "
                f"{config_path}; drop one of them"
            )
        transport = section.type
    if transport is None:
        raise ConfigError("name the transport: --transport NAME, or --config RUN.yaml")
    servers = registry.names("transport_server")
    if transport not in servers:
        if transport in registry.names("transport"):
            raise ConfigError(
                f"transport {transport!r} needs no server (its clients share memory); "
                f"servers exist for: {', '.join(servers) or 'none installed'}"
            )
        raise ConfigError(
            f"no transport named {transport!r} is installed; transports with a server: "
            f"{', '.join(servers) or 'none'} (see `rlax plugins`)"
        )
    registration = registry.get("transport_server", transport)
    merge_overrides(settings, dict(overrides or {}))
    settings["type"] = transport
    config = _validate(registration.config_cls, settings, transport)
    return registry.build("transport_server", config, BuildContext(registry))


def _validate(config_cls: type[BaseModel], settings: dict[str, Any], name: str) -> BaseModel:
    try:
        return config_cls.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()
        )
        allowed = ", ".join(f for f in config_cls.model_fields if f != "type")
        raise ConfigError(
            f"invalid {name} transport settings: {problems} (settings: {allowed})"
        ) from None
