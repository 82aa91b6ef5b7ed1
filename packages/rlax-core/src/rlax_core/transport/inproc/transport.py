"""The ``inproc`` transport: store and queues in this process's memory (the embedded default)."""

from __future__ import annotations

import threading

from pydantic import Field

from rlax_core.contracts.transport import Transport
from rlax_core.transport.inproc.parameter_store import InProcParameterStore
from rlax_core.transport.inproc.queue import InProcQueue
from rlax_core.transport.settings import TransportSettings


class InProcTransportConfig(TransportSettings):
    """Trainer and workers are threads of one process and share memory. No services."""

    keep_versions: int = Field(
        default=1,
        ge=1,
        description="Policy versions the parameter store retains. One suffices in one "
        "process: a worker samples from its version's arrays in place, which keeps them "
        "alive after the store lets go; each retained version costs a copy of the policy.",
    )


class InProcTransport(Transport):
    """One parameter store and a set of named queues, shared by the threads of a process.

    Closing the transport closes the store and queues it handed out; clients made with
    their ``client()`` methods stay open.
    """

    def __init__(self, config: InProcTransportConfig | None = None) -> None:
        self._config = config or InProcTransportConfig()
        self._store = InProcParameterStore(keep_last=self._config.keep_versions)
        self._queues: dict[str, InProcQueue] = {}
        self._lock = threading.Lock()

    def parameter_store(self) -> InProcParameterStore:
        return self._store

    def queue(self, name: str) -> InProcQueue:
        with self._lock:
            if name not in self._queues:
                self._queues[name] = InProcQueue(
                    name,
                    dedupe_window_s=self._config.dedupe_window_s,
                    max_deliveries=self._config.max_deliveries,
                )
            return self._queues[name]

    def close(self) -> None:
        self._store.close()
        with self._lock:
            for queue in self._queues.values():
                queue.close()
