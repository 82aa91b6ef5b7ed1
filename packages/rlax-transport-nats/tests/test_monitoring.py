"""nats-server's HTTP monitoring endpoint, which an autoscaler reads a queue's backlog from."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from rlax_transport_nats import NatsServerProcess
from rlax_transport_nats.queue import NatsQueue
from rlax_transport_nats.server import free_port
from rlax_transport_nats.testing import client_config

pytestmark = pytest.mark.network


def test_monitoring_reports_a_queue_backlog_per_stream_and_consumer(tmp_path: Path) -> None:
    port = free_port()
    with NatsServerProcess(store_dir=tmp_path / "js", monitoring_port=port) as server:
        queue = NatsQueue.open(client_config(server.url, namespace="demo"), "to_verify")
        try:
            for item in ("g1", "g2", "g3"):
                queue.put(item, b"group")
            leased = queue.get(lease_s=30)
            assert leased is not None
            # The query KEDA's nats-jetstream scaler makes, on the global account ($G):
            # a server without accounts keeps every stream there.
            url = f"http://127.0.0.1:{port}/jsz?acc=%24G&consumers=true&config=true"
            with urllib.request.urlopen(url, timeout=10) as answer:
                report = json.load(answer)
        finally:
            queue.close()
    (account,) = report["account_details"]
    streams = {s["name"]: s for s in account["stream_detail"]}
    (consumer,) = streams["RLAX_demo_Q_to_verify"]["consumer_detail"]
    assert consumer["name"] == "workers"
    # Waiting plus leased: the backlog the scaler divides by its lag threshold.
    assert (consumer["num_pending"], consumer["num_ack_pending"]) == (2, 1)


def test_monitoring_is_off_unless_asked_for(tmp_path: Path) -> None:
    server = NatsServerProcess(store_dir=tmp_path / "js")
    assert "http:" not in server._config_text()
    server.monitoring_port = 8222
    assert 'http: "127.0.0.1:8222"\n' in server._config_text()
