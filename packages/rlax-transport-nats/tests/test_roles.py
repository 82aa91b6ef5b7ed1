"""The core contract suites with each role's own client, on a server that enforces roles.

A store is published to by the trainer and read by a worker; a queue is put to by the
role that puts to it in a run and leased from by the role that leases from it. Nothing
a role does in a run may be denied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.contracts.queue import Queue
from rlax_core.kit.transport import Role
from rlax_core.testing import ParameterStoreContract, QueueContract
from rlax_core.testing.parameter_store_contract import ParameterStoreHarness
from rlax_core.testing.queue_contract import QueueHarness
from rlax_core.transport.credentials import generate_run_credentials
from rlax_core.types.lease import Lease, QueueStats
from rlax_core.types.policy import PolicyVersion
from rlax_transport_nats import NatsParameterStore, NatsQueue, NatsTransportConfig
from rlax_transport_nats.config import NatsServerSettings
from rlax_transport_nats.serve import NatsTransportServer
from rlax_transport_nats.server import free_port
from rlax_transport_nats.testing import NatsStoreHarness, delete_namespace

pytestmark = pytest.mark.network

# The contract's queue names, each played by a run queue with its producer and consumer.
QUEUES: dict[str, tuple[str, Role, Role]] = {
    "items": ("to_verify", "worker", "verifier"),
    "other-items": ("rollouts", "verifier", "trainer"),
    "poison": ("prompts", "trainer", "worker"),
}


class RoleServer:
    """A server of one run (namespace ``run``) with a credential per role."""

    def __init__(self, folder: Path) -> None:
        self.made = generate_run_credentials(folder / "credentials", ["127.0.0.1"])
        self.config = NatsTransportConfig(
            servers=[f"nats://127.0.0.1:{free_port()}"],
            namespace="run",
            connect_timeout_s=3.0,
            reconnect_timeout_s=10.0,
            lease_tick_s=1.0,
            chunk_mb=1,
            keep_versions=NatsStoreHarness.keep_last,
            max_weights_gb=4.0,
            max_queue_gb=0.05,
            server=NatsServerSettings(
                store_dir=folder / "jetstream",
                credentials_dir=self.made.server / "credentials",
            ),
        )
        self.server = NatsTransportServer(self.config)
        self.server.start()

    def role_config(self, role: Role) -> NatsTransportConfig:
        return self.config.model_copy(
            update={"credentials_file": self.made.roles[role] / "credential"}
        )

    def reset(self) -> None:
        """Deletes the run's streams (as the trainer) and makes them again."""
        delete_namespace(self.role_config("trainer"))
        NatsParameterStore.open(self.role_config("trainer")).close()


@pytest.fixture(scope="module")
def role_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoleServer]:
    server = RoleServer(tmp_path_factory.mktemp("roles"))
    yield server
    server.server.stop()


class SplitStore(ParameterStore):
    """The trainer publishes, a worker reads."""

    def __init__(self, trainer: ParameterStore, worker: ParameterStore) -> None:
        self.trainer, self.worker = trainer, worker

    def publish(
        self, version: int, params: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> PolicyVersion:
        return self.trainer.publish(version, params, metadata)

    def latest(self) -> PolicyVersion | None:
        return self.worker.latest()

    def versions(self) -> list[int]:
        return self.worker.versions()

    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, Any] | None = None,
    ) -> FetchedParameters:
        return self.worker.fetch(version, names, out)

    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        return self.worker.wait_for_newer(than, timeout)

    def close(self) -> None:
        self.trainer.close()
        self.worker.close()


class RoleStoreHarness(ParameterStoreHarness):
    keep_last = NatsStoreHarness.keep_last

    def __init__(self, server: RoleServer) -> None:
        self.server = server
        self.lab = NatsStoreHarness("unused")  # its corrupt(), with the trainer's rights
        self.lab.config = server.role_config("trainer")

    def open(self) -> ParameterStore:
        return SplitStore(
            NatsParameterStore.open(self.server.role_config("trainer")),
            NatsParameterStore.open(self.server.role_config("worker")),
        )

    def corrupt(self, version: int, name: str) -> None:
        self.lab.corrupt(version, name)


class SplitQueue(Queue):
    """Puts by one role's client, leases by another's."""

    def __init__(self, producer: NatsQueue, consumer: NatsQueue) -> None:
        self.producer, self.consumer = producer, consumer

    @property
    def name(self) -> str:
        return self.consumer.name

    def put(self, item_id: str, payload: bytes) -> bool:
        return self.producer.put(item_id, payload)

    def get(self, lease_s: float, timeout: float | None = 0.0) -> Lease | None:
        return self.consumer.get(lease_s, timeout)

    def ack(self, lease: Lease) -> None:
        self.consumer.ack(lease)

    def nack(self, lease: Lease) -> None:
        self.consumer.nack(lease)

    def extend(self, lease: Lease, lease_s: float) -> Lease:
        return self.consumer.extend(lease, lease_s)

    def stats(self) -> QueueStats:
        return self.consumer.stats()

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


class RoleQueueHarness(QueueHarness):
    lease_s = 0.5

    def __init__(self, server: RoleServer) -> None:
        self.server = server
        self.made: list[NatsQueue] = []  # the trainer's, which created each queue

    def open(self, name: str = "items", *, max_deliveries: int | None = None) -> Queue:
        queue, producer, consumer = QUEUES[name]
        if not self.made or all(q.name != queue for q in self.made):
            trainer = self.server.role_config("trainer")
            self.made.append(NatsQueue.open(trainer, queue, max_deliveries=max_deliveries))
        return SplitQueue(
            NatsQueue.open(self.server.role_config(producer), queue),
            NatsQueue.open(self.server.role_config(consumer), queue),
        )

    def close(self) -> None:
        for queue in self.made:
            queue.close()


class TestStoreWithRoles(ParameterStoreContract):
    @pytest.fixture
    def store_harness(self, role_server: RoleServer) -> RoleStoreHarness:
        role_server.reset()
        return RoleStoreHarness(role_server)


class TestQueueWithRoles(QueueContract):
    @pytest.fixture
    def queue_harness(self, role_server: RoleServer) -> Iterator[RoleQueueHarness]:
        role_server.reset()
        harness = RoleQueueHarness(role_server)
        yield harness
        harness.close()
