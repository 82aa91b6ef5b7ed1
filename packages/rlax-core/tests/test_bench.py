"""The benchmark runner: suites, same-run baselines, ratios, JSON results."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from rlax_core.bench import Bench
from rlax_core.cli.main import main

SUITE = '''\
"""A toy suite: sleeping less is faster."""
import time

def run(bench):
    bench.time("nap", lambda: time.sleep(0.01), lambda: time.sleep(0.03),
               baseline_label="longer nap", repeats=3)
    bench.record("items", subject=200.0, baseline=100.0, unit="items/s",
                 higher_is_better=True, baseline_label="half")
'''


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "__init__.py").write_text("")  # a suites folder is a package
    (folder / "toy.py").write_text(SUITE)
    return folder


def test_a_suite_writes_json_with_ratios(
    bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "toy.json"
    assert main(["bench", "toy", "--dir", str(bench_dir), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["suite"] == "toy"
    nap, items = report["results"]
    assert nap["unit"] == "s" and len(nap["subject_samples"]) == 3
    assert nap["speedup"] > 1.5  # 10 ms against 30 ms
    assert items["speedup"] == pytest.approx(2.0)
    table = capsys.readouterr().out
    assert "longer nap" in table and "2.00×" in table


def test_list_and_unknown_suite(bench_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--list", "--dir", str(bench_dir)]) == 0
    assert "A toy suite" in capsys.readouterr().out
    assert main(["bench", "nope", "--dir", str(bench_dir)]) == 2
    assert "no benchmark suite 'nope'" in capsys.readouterr().err


def test_throughput_figures_use_the_work_unit() -> None:
    bench = Bench(quick=True)
    result = bench.time(
        "x", lambda: time.sleep(0.01), lambda: time.sleep(0.02), baseline_label="b",
        work=10, work_unit="MB",
    )  # fmt: skip
    assert result.unit == "MB/s" and result.higher_is_better
    assert result.subject > result.baseline


def _quick_report(suite: str, tmp_path: Path) -> dict:
    """Runs a shipped suite with ``--quick``; returns its JSON report."""
    out = tmp_path / f"{suite}.json"
    suites = Path(__file__).resolve().parents[3] / "benchmarks"
    assert main(["bench", suite, "--quick", "--dir", str(suites), "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_shipped_suites_run_quickly(tmp_path: Path) -> None:
    results = _quick_report("transport", tmp_path)["results"]
    assert all(r["subject"] > 0 and r["baseline"] > 0 for r in results)


def test_the_rl_suite_runs_quickly(tmp_path: Path) -> None:
    """`rlax bench rl --quick`: embedded runs at k = 0 and 1, and on the rollout engine
    with in-flight updates off and on, figures from their metrics."""
    report = _quick_report("rl", tmp_path)
    names = [r["name"] for r in report["results"]]
    assert names == [
        "end-to-end samples/s, k=1",
        "end-to-end samples/s, ideal overlap",
        "trainer tokens/s, k=1",
        "in-flight updates: end-to-end samples/s",
    ]
    assert all(r["subject"] > 0 and r["baseline"] > 0 for r in report["results"])
    per_k = report["notes"]["per_k"]
    assert per_k["0"]["staleness_max"] == 0 and per_k["1"]["staleness_max"] <= 1
    assert 1.0 <= report["notes"]["ideal_speedup"] <= 2.0
    in_flight = report["notes"]["in_flight"]
    assert in_flight["off"]["mixed_version_fraction"] == 0  # one version per group
    for side in ("off", "on"):
        assert in_flight[side]["staleness_max"] <= 1
        assert 0 <= in_flight[side]["on_policy_token_fraction"] <= 1


def test_the_rl_suite_runs_the_parts_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``RLAX_BENCH_RL_PARTS=in_flight``: the in-flight pair alone; a part that does not
    exist is named in a clean error before anything runs."""
    monkeypatch.setenv("RLAX_BENCH_RL_PARTS", "in_flight")
    report = _quick_report("rl", tmp_path)
    assert [r["name"] for r in report["results"]] == ["in-flight updates: end-to-end samples/s"]
    assert "per_k" not in report["notes"] and "in_flight" in report["notes"]
    monkeypatch.setenv("RLAX_BENCH_RL_PARTS", "in_flight,warp_drive")
    suites = Path(__file__).resolve().parents[3] / "benchmarks"
    assert main(["bench", "rl", "--quick", "--dir", str(suites)]) == 2
    err = capsys.readouterr().err
    assert "warp_drive" in err and "staleness, in_flight, tunix" in err


@pytest.mark.sandbox  # the code runs start Lambda sandboxes
def test_the_verify_stage_suite_runs_quickly(tmp_path: Path) -> None:
    """`rlax bench verify_stage --quick`: code runs on the local Lambda, and the math pair."""
    report = _quick_report("verify_stage", tmp_path)
    names = [r["name"] for r in report["results"]]
    assert names == [
        f"{what}: {figure}"
        for what in (
            "code, lambda +0.5 s, k=2, inline", "code, lambda +0.5 s, k=2, stage",
            "math quickstart, k=1",
        )
        for figure in ("samples/s", "worker generation busy")
    ]  # fmt: skip
    assert all(r["subject"] > 0 and r["baseline"] > 0 for r in report["results"])
    notes = report["notes"]
    assert notes["invocations"]["none-0.5s"] == 0  # the ceiling judges nothing
    assert notes["invocations"]["inline-0.5s"] > 0 and notes["invocations"]["stage-0.5s"] > 0
    assert all(0 < s["generation_busy"] <= 1 for s in notes["per_setting"].values())


def test_the_scale_suite_runs_quickly(tmp_path: Path) -> None:
    """`rlax bench scale --quick`: fp32 and bf16 runs of the test model, memory from outside."""
    report = _quick_report("scale", tmp_path)
    names = [r["name"] for r in report["results"]]
    assert names[-1] == "bf16 logprob gap, 16 tokens" and len(names) == 17
    for dtype in ("float32", "bfloat16"):  # the decode's weight reads, beside their ceiling
        assert f"tiny {dtype} batch 8 decode weight reads vs the same products alone" in names
    for label in ("float32 16 tokens", "bfloat16 16 tokens"):
        notes = report["notes"][label]
        assert notes["peak_rss_bytes"] > notes["parameter_bytes"] > 0
        budget = notes["budget_bytes"]
        assert budget["adamw_moments"] == 2 * budget["parameters"] > 0 < budget["kv_cache"]
        assert len(notes["rss_gib_by_step"]) == 4
        assert Path(notes["rss_png"]).stat().st_size > 5_000
    rows = {r["name"]: r for r in report["results"]}
    gap = rows["bf16 logprob gap, 16 tokens"]
    assert gap["baseline"] < 1e-5 < gap["subject"] < 8e-3  # fp32 agrees; bf16 within its bound
    # The floor: the worker's check in bf16, gone with fp32 activations over bf16 weights.
    check = rows["worker's logprob check, bf16, 16 tokens"]
    assert check["baseline"] < 1e-5 < check["subject"]
    floor = rows["worker's logprob check, bf16 weights and fp32 activations, 16 tokens"]
    assert floor["subject"] < 1e-5 and floor["baseline"] == check["subject"]


def test_the_rollout_suite_runs_quickly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rlax bench rollout --quick`: the engine beside the static sampler and beside itself
    with contiguous bursts off and with its weights as stored, both workloads, in two
    rounds whose medians are the rows."""
    monkeypatch.setenv("RLAX_BENCH_ROLLOUT_ROUNDS", "2")
    report = _quick_report("rollout", tmp_path)
    rows = {r["name"]: r for r in report["results"]}
    for workload in ("long-tailed", "equal lengths"):
        speed = rows[f"{workload}, 4 slots: useful tokens/s"]
        assert speed["subject"] > 0 < speed["baseline"]
        paged = rows[f"{workload}, 4 slots: useful tokens/s vs paged reads"]
        assert paged["subject"] == speed["subject"] and paged["baseline"] > 0
        stored = rows[f"{workload}, 4 slots: useful tokens/s vs stored layout"]
        assert stored["subject"] == speed["subject"] and stored["baseline"] > 0
        kv = rows[f"{workload}, 4 slots: peak KV cache bytes"]
        assert kv["subject"] > 0 < kv["baseline"]
        notes = report["notes"][f"{workload}, 4 slots"]
        assert kv["subject"] <= notes["peak_pool_and_largest_copy_bytes"]  # held at once
        assert 0 < notes["slot_occupancy"] <= 1
        rounds = notes["seconds_by_round"]
        assert sorted(rounds) == ["engine", "paged", "static", "stored"]
        assert all(len(seconds) == 2 for seconds in rounds.values())
        useful = report["notes"][f"{workload} useful tokens"]
        assert speed["baseline"] == pytest.approx(useful / statistics.median(rounds["static"]))
    assert report["notes"]["long-tailed useful tokens"] > report["notes"]["prompts"]


@pytest.mark.parametrize(
    ("variable", "value", "listed"),
    [("RLAX_BENCH_ROLLOUT_BASELINES", "static,sglang",
      "static, vllm, vllm-slots, transformers, paged, stored"),
     ("RLAX_BENCH_ROLLOUT_WORKLOADS", "equal,sglang", "long-tailed, equal")],
)  # fmt: skip
def test_the_rollout_suite_names_an_unknown_part(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, variable, value, listed
) -> None:
    """A baseline or a workload that does not exist: a clean error that lists the ones
    there are, before anything runs."""
    monkeypatch.setenv(variable, value)
    suites = Path(__file__).resolve().parents[3] / "benchmarks"
    assert main(["bench", "rollout", "--quick", "--dir", str(suites)]) == 2
    err = capsys.readouterr().err
    assert "sglang" in err and listed in err


def test_the_rollout_suite_names_a_bad_count(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Slot counts that are not whole groups of samples, and prompt counts that are not
    numbers: a clean error naming the variable and what it takes, before anything runs."""
    suites = Path(__file__).resolve().parents[3] / "benchmarks"
    cases = [("RLAX_BENCH_ROLLOUT_SLOTS", "16,6", "multiples of 4"),
             ("RLAX_BENCH_ROLLOUT_PROMPTS", "many", "positive numbers")]  # fmt: skip
    for variable, value, wanted in cases:
        monkeypatch.setenv(variable, value)
        assert main(["bench", "rollout", "--dir", str(suites)]) == 2
        err = capsys.readouterr().err
        assert f"{variable}='{value}'" in err and wanted in err
        monkeypatch.delenv(variable)


def test_the_serve_suite_runs_quickly(tmp_path: Path) -> None:
    """`rlax bench serve --quick`: the endpoint, whole and streamed, beside the engine."""
    report = _quick_report("serve", tmp_path)
    rows = {r["name"]: r for r in report["results"]}
    for kind in ("whole responses", "streamed"):
        speed = rows[f"endpoint useful tokens/s, {kind}"]
        assert speed["subject"] > 0 < speed["baseline"]
        # The same requests and seeds: the same tokens through both paths.
        assert report["notes"][kind]["tokens"] == report["notes"]["engine alone"]["tokens"]


def test_a_failing_side_engine_says_why(tmp_path: Path) -> None:
    """A baseline's helper that fails raises with the end of its own output, not a bare
    exit status."""
    import sys

    from benchmarks import side_engine

    # json.tool takes the checkpoint folder for its input file, and stops on it
    with pytest.raises(
        RuntimeError, match=r"json\.tool failed with exit status 2(.|\n)*Is a directory"
    ):
        side_engine(Path(sys.executable), "json.tool", [], tmp_path, {})
