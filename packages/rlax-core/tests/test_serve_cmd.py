"""``rlax serve``: servers are found through the register_transport_servers hook."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from rlax_core.cli.main import main
from rlax_core.cli.serve_cmd import build_server
from rlax_core.config.overrides import parse_overrides
from rlax_core.contracts import TransportServer
from rlax_core.errors import ConfigError
from rlax_core.hookspecs import hookimpl
from rlax_core.plugins import collect_registry, make_plugin_manager


class EchoConfig(BaseModel):
    """A toy networked transport: a TCP listener."""

    port: int = Field(default=0, description="Port to listen on (0: any free one).")


class EchoServer(TransportServer):
    def __init__(self, config: EchoConfig) -> None:
        self.config = config
        self.socket: socket.socket | None = None

    @property
    def address(self) -> str:
        assert self.socket is not None
        return f"127.0.0.1:{self.socket.getsockname()[1]}"

    def start(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", self.config.port))

    def running(self) -> bool:
        return self.socket is not None

    def stop(self) -> None:
        if self.socket is not None:
            self.socket.close()
            self.socket = None


class EchoPlugin:
    @hookimpl
    def register_transports(self, register):
        register("echo", lambda config, context: None, EchoConfig)

    @hookimpl
    def register_transport_servers(self, register):
        register("echo", lambda config, context: EchoServer(config), EchoConfig)


@pytest.fixture
def registry():
    return collect_registry(
        make_plugin_manager(load_entry_points=False, extra_plugins=[EchoPlugin()])
    )


def test_a_registered_server_is_built_from_the_transport_settings(registry) -> None:
    assert registry.names("transport_server") == ["echo"]
    server = build_server(registry, transport="echo", overrides={"port": 0})
    with server:
        assert server.running()
        host, port = server.address.split(":")
        socket.create_connection((host, int(port)), timeout=2).close()
    assert not server.running()


def test_settings_come_from_a_run_config(registry, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("transport:\n  type: echo\n  port: 0\n")
    server = build_server(registry, transport=None, config_path=config)
    assert isinstance(server, EchoServer) and server.config.port == 0
    with pytest.raises(ConfigError, match="disagrees"):
        build_server(registry, transport="inproc", config_path=config)


def test_bad_requests_say_what_to_do(registry) -> None:
    with pytest.raises(ConfigError, match="needs no server"):
        build_server(registry, transport="inproc")
    with pytest.raises(ConfigError, match=r"no transport named 'carrier-pigeon'.*echo"):
        build_server(registry, transport="carrier-pigeon")
    with pytest.raises(ConfigError, match="invalid echo transport settings: port"):
        build_server(registry, transport="echo", overrides={"port": "many"})
    with pytest.raises(ConfigError, match="name the transport"):
        build_server(registry, transport=None)


def test_overrides_are_yaml_values_and_dots_nest() -> None:
    assert parse_overrides(["port=5", "server.state_dir=/x", "token=abc", "servers=[a, b]"]) == {
        "port": 5,
        "server": {"state_dir": "/x"},
        "token": "abc",
        "servers": ["a", "b"],
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["oops"])


def test_the_cli_refuses_a_transport_without_server(capsys: pytest.CaptureFixture) -> None:
    assert main(["serve", "param-server", "--transport", "inproc"]) == 2
    assert "needs no server" in capsys.readouterr().err
