"""The embedded in-process transport."""

from rlax_core.transport.inproc.parameter_store import InProcParameterStore
from rlax_core.transport.inproc.queue import InProcQueue
from rlax_core.transport.inproc.transport import InProcTransport, InProcTransportConfig

__all__ = ["InProcParameterStore", "InProcQueue", "InProcTransport", "InProcTransportConfig"]
