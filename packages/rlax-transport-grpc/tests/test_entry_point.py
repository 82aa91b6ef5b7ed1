"""The rlax-transport-grpc plugin is found through its ``rlax`` entry point."""

from __future__ import annotations

import importlib.metadata

from rlax_core.plugins import BuildContext, load_registry
from rlax_transport_grpc import GrpcParameterServer, GrpcTransport


def test_entry_point_loads_the_plugin_module() -> None:
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="rlax") if ep.name == "grpc"
    ]
    assert entry_point.value == "rlax_transport_grpc.plugin"
    assert entry_point.dist.name == "rlax-transport-grpc"
    assert entry_point.load().__name__ == "rlax_transport_grpc.plugin"


def test_the_transport_and_its_server_are_registered() -> None:
    registry = load_registry()
    assert "rlax-transport-grpc" in registry.loaded_packages
    transport = registry.get("transport", "grpc")
    server = registry.get("transport_server", "grpc")
    assert transport.package == server.package == "rlax-transport-grpc"
    config = transport.config_cls(address="127.0.0.1:1", token="t")
    built = registry.build("transport", config, BuildContext(registry))
    assert isinstance(built, GrpcTransport)  # connects lazily: nothing listens at :1
    built.close()
    serving = registry.build(
        "transport_server", server.config_cls(address="127.0.0.1:0"), BuildContext(registry)
    )
    assert isinstance(serving, GrpcParameterServer)
