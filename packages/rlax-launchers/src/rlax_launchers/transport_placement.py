"""Where a networked transport's server runs, and how its clients and server reach it.

A cloud run has separate processes on separate hosts, so it needs a transport with a
server (``nats`` or ``grpc``). The launcher runs that server with
``rlax serve param-server --config RUN.yaml --set ...`` (listening on every interface,
keeping its state in a folder that survives a restart) and points every client at the
host the server was placed on. Only the settings named here are touched; the launcher
reads the transport section as plain data and imports no transport plugin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError

_ANY_INTERFACE = "0.0.0.0"


@dataclass(frozen=True)
class TransportPlacement:
    """How to place the server of one transport.

    Attributes:
        type: the transport's ``type``.
        port: the port the server listens on (from the run config's address).
        scheme: URL scheme of the clients' address (``nats``/``tls``), empty for gRPC.
        server_extra: the extra of the transport's package that the server host needs
            (``nats-server`` comes with ``rlax-transport-nats[server]``).
        bulk_port: the gRPC server's bulk fetch port (see rlax_transport_grpc.bulk), fixed
            so that a Service or a firewall can let it through; None when off.
    """

    type: str
    port: int
    scheme: str
    server_extra: str | None
    bulk_port: int | None = None

    @property
    def ports(self) -> list[tuple[str, int]]:
        """Every port the server listens on, named (the first one is the service's)."""
        named = [(self.type, self.port)]
        if self.bulk_port is not None:
            named.append(("bulk", self.bulk_port))
        return named

    def client_settings(self, host: str) -> dict[str, Any]:
        """The transport settings that make a client connect to ``host``."""
        if self.type == "nats":
            return {"servers": [f"{self.scheme}://{host}:{self.port}"]}
        return {"address": f"{host}:{self.port}"}

    def server_set_args(self, state_dir: str, interface: str = _ANY_INTERFACE) -> list[str]:
        """``--set`` arguments of ``rlax serve``: listen on ``interface`` (every one by
        default), keep state in ``state_dir``.

        Values are JSON (which YAML reads as written), so an address is never mistaken for
        a number.
        """
        if self.type == "nats":
            listen = {"servers": [f"{self.scheme}://{interface}:{self.port}"]}
            state = {"server.store_dir": state_dir}
        else:
            listen = {"address": f"{interface}:{self.port}"}
            state = {"server.state_dir": state_dir}
            if self.bulk_port is not None:
                listen["server.bulk_port"] = self.bulk_port
        args: list[str] = []
        for key, value in {**listen, **state}.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
        return args


def transport_placement(
    run_config: RunConfigBase, launcher: str, *, tls: bool = False
) -> TransportPlacement:
    """The placement of the run config's transport.

    Args:
        run_config: the run config.
        launcher: the launcher's name, for messages.
        tls: the launcher serves TLS (per-run credentials): NATS URLs use ``tls://``.

    Raises:
        ConfigError: the transport has no server (``inproc``) or is one the launchers do
            not know how to place.
    """
    section = run_config.transport
    kind = getattr(section, "type", None)
    if kind == "nats":
        url = urlparse(section.servers[0])
        scheme = "tls" if tls else url.scheme or "nats"
        return TransportPlacement("nats", url.port or 4222, scheme, "server")
    if kind == "grpc":
        port = int(section.address.rsplit(":", 1)[1])
        # The run config's bulk port: null is off; 0 (any free port) is pinned next to
        # the gRPC port, since clients on other hosts must be let through to it.
        bulk = getattr(getattr(section, "server", None), "bulk_port", 0)
        if bulk == 0:
            bulk = port + 1
        return TransportPlacement("grpc", port, "", None, bulk_port=bulk)
    if kind == "inproc" or kind is None:
        raise ConfigError(
            f"transport {kind or 'inproc'!r} lives inside one process, but a {launcher} run has "
            "separate processes on separate hosts: set transport.type to nats or grpc"
        )
    raise ConfigError(
        f"the {launcher} launcher does not know where to run the server of transport "
        f"{kind!r}; it places nats and grpc"
    )
