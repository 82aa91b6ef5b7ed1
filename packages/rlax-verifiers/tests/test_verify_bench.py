"""``rlax bench verify --quick`` runs every backend and its same-run baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlax_core.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.docker]
REPO = Path(__file__).resolve().parents[3]


def test_the_verify_suite_measures_every_backend_beside_a_baseline(tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    assert (
        main(["bench", "verify", "--quick", "--dir", str(REPO / "benchmarks"), "--out", str(out)])
        == 0
    )
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    for backend in (
        "local",
        "docker (batches of 100)",
        "lambda, local Invoke API (batches of 100)",
    ):
        assert [n for n in names if n.startswith(backend + ":")] == [
            f"{backend}: tests/s",
            f"{backend}: p50 latency",
            f"{backend}: p99 latency",
        ]
    assert all(r["subject"] > 0 and r["baseline"] > 0 for r in report["results"])
    for backend in ("local", "docker", "lambda"):
        checked = report["notes"][backend]
        assert checked["sandbox_errors"] == 0 and checked["as_expected"] == report["notes"]["tests"]
