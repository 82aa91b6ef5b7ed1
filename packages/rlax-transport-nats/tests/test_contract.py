"""The NATS transport against the core contract suites, on a real nats-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlax_core.testing import ParameterStoreContract, QueueContract
from rlax_transport_nats import NatsServerProcess
from rlax_transport_nats.testing import NatsQueueHarness, NatsStoreHarness, delete_namespace

pytestmark = pytest.mark.network


class TestNatsStore(ParameterStoreContract):
    @pytest.fixture
    def store_harness(self, nats_server: NatsServerProcess) -> Iterator[NatsStoreHarness]:
        harness = NatsStoreHarness(nats_server.url)
        yield harness
        delete_namespace(harness.config)


class TestNatsQueue(QueueContract):
    @pytest.fixture
    def queue_harness(self, nats_server: NatsServerProcess) -> Iterator[NatsQueueHarness]:
        harness = NatsQueueHarness(nats_server.url)
        yield harness
        delete_namespace(harness.config)
