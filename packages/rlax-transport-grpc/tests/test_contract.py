"""The gRPC transport against the core contract suites, on a real server process."""

from __future__ import annotations

import pytest

from rlax_core.testing import ParameterStoreContract, QueueContract
from rlax_transport_grpc.testing import GrpcQueueHarness, GrpcStoreHarness, ServeProcess

pytestmark = pytest.mark.network


class TestGrpcStore(ParameterStoreContract):
    @pytest.fixture
    def store_harness(self, grpc_server: ServeProcess) -> GrpcStoreHarness:
        return GrpcStoreHarness(grpc_server)


class TestGrpcQueue(QueueContract):
    @pytest.fixture
    def queue_harness(self, grpc_server: ServeProcess) -> GrpcQueueHarness:
        return GrpcQueueHarness(grpc_server)
