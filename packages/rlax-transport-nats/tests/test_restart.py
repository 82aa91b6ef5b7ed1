"""A nats-server restart in the middle of a run: nothing lost, nothing corrupt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlax_core.testing import RestartContract
from rlax_transport_nats.testing import NatsRestartHarness


class TestNatsRestart(RestartContract):
    @pytest.fixture
    def restart_harness(self, tmp_path: Path) -> Iterator[NatsRestartHarness]:
        harness = NatsRestartHarness(tmp_path / "js")
        yield harness
        harness.stop()
