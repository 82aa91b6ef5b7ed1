"""The rlax-transport-nats plugin is found through its ``rlax`` entry point."""

from __future__ import annotations

import importlib.metadata

from rlax_core.plugins import BuildContext, load_registry
from rlax_transport_nats import NatsTransport
from rlax_transport_nats.serve import NatsTransportServer


def test_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="rlax") if ep.name == "nats"
    ]
    assert entry_point.value == "rlax_transport_nats.plugin"
    assert entry_point.dist.name == "rlax-transport-nats"
    assert entry_point.load().__name__ == "rlax_transport_nats.plugin"


def test_the_transport_and_its_server_are_registered() -> None:
    registry = load_registry()
    assert "rlax-transport-nats" in registry.loaded_packages
    transport = registry.get("transport", "nats")
    config = transport.config_cls(servers=["nats://127.0.0.1:1"], keep_versions=4)
    built = registry.build("transport", config, BuildContext(registry))
    assert isinstance(built, NatsTransport)  # connects lazily
    built.close()
    server = registry.get("transport_server", "nats")
    serving = registry.build("transport_server", server.config_cls(), BuildContext(registry))
    assert isinstance(serving, NatsTransportServer)
