"""The plugin that ships with rlax-core: the embedded defaults."""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_core.plugins.registry import BuildContext
from rlax_core.transport.inproc import InProcTransport, InProcTransportConfig


def make_inproc_transport(config: InProcTransportConfig, context: BuildContext) -> InProcTransport:
    """Builds the in-process transport (one shared store and queue set per call)."""
    return InProcTransport(config)


@hookimpl
def register_transports(register: Register) -> None:
    """Registers the ``inproc`` transport."""
    register("inproc", make_inproc_transport, InProcTransportConfig)
