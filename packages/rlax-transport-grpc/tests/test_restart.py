"""A parameter server killed and restarted mid-run: nothing lost, nothing corrupt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlax_core.testing import RestartContract
from rlax_transport_grpc.testing import GrpcRestartHarness


class TestGrpcRestart(RestartContract):
    @pytest.fixture
    def restart_harness(self, tmp_path: Path) -> Iterator[GrpcRestartHarness]:
        harness = GrpcRestartHarness(tmp_path / "state")
        yield harness
        harness.stop()
