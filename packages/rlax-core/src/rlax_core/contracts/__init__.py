"""The interfaces that plugins implement. Each module states its guarantees."""

from rlax_core.contracts.environment import (
    Environment,
    EnvStep,
    Episode,
    Message,
    Tool,
    ToolError,
    Turn,
)
from rlax_core.contracts.launcher import (
    PROCESS_STATES,
    Launcher,
    ProcessRole,
    ProcessState,
    ProcessStatus,
    RenderedArtifact,
)
from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.contracts.prompts import PromptExample, PromptSource
from rlax_core.contracts.queue import Queue
from rlax_core.contracts.transport import ServerSecurity, Transport, TransportServer
from rlax_core.contracts.verifier import Judge, Program, RunRequest, SandboxBackend

__all__ = [
    "PROCESS_STATES",
    "EnvStep",
    "Environment",
    "Episode",
    "FetchedParameters",
    "Judge",
    "Launcher",
    "Message",
    "ParameterStore",
    "ProcessRole",
    "ProcessState",
    "ProcessStatus",
    "Program",
    "PromptExample",
    "PromptSource",
    "Queue",
    "RenderedArtifact",
    "RunRequest",
    "SandboxBackend",
    "ServerSecurity",
    "Tool",
    "ToolError",
    "Transport",
    "TransportServer",
    "Turn",
]
