"""Sandbox throughput and latency: local, docker and lambda, beside bare spawns.

2,000 small Python programs (quick: 100), mixed: 48% right answers, 48% wrong ones, 4%
endless loops (TLE at the 0.5 s limit). Every figure is measured in this run:

* local sandbox vs ``python3 -c`` spawned with no isolation at all: the same programs,
  one test per call from ``WORKERS`` client threads (closed loop); tests/s over the
  whole set, and p50/p99 of each call's latency.
* docker sandbox (batches of 100 tests, one container each) vs ``docker run`` per test
  (on a sample: each takes seconds); a batched test's latency is its batch's.
* lambda sandbox through boto3 and the local Lambda Invoke API (batches of 100 tests,
  a fresh handler process per invocation) vs the same bare spawn.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlax_core.bench import Bench
from rlax_core.contracts.verifier import Program, RunRequest

WORKERS = 2
TIME_LIMIT_S = 0.5
BATCH = 100
DOCKER_RUN_SAMPLE = 20


def _programs(count: int) -> list[tuple[str, str, str]]:
    """(kind, source, stdin): AC and WA print a sum, TLE loops forever."""
    programs = []
    for i in range(count):
        if i % 25 == 24:
            programs.append(("TLE", "while True:\n    pass\n", ""))
        elif i % 2 == 0:
            programs.append(("AC", "n = int(input())\nprint(sum(range(n)))\n", str(i)))
        else:
            programs.append(("WA", "n = int(input())\nprint(sum(range(n)) + 1)\n", str(i)))
    return programs


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _closed_loop(
    calls: list[Callable[[], Any]], threads: int
) -> tuple[float, list[float], list[Any]]:
    """Runs ``calls`` from ``threads`` threads: (tests/s, per-call latencies, results)."""
    latencies: list[float] = [0.0] * len(calls)

    def timed(index: int) -> Any:
        started = time.perf_counter()
        result = calls[index]()
        latencies[index] = time.perf_counter() - started
        return result

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(timed, range(len(calls))))
    return len(calls) / (time.perf_counter() - started), latencies, results


def _bare_spawn(source: str, stdin: str) -> str:
    try:
        done = subprocess.run(["/usr/bin/python3", "-c", source], input=stdin, text=True,
                              capture_output=True, timeout=TIME_LIMIT_S)  # fmt: skip
        return done.stdout
    except subprocess.TimeoutExpired:
        return "TLE"


def _program(source: str) -> Program:
    return Program(language="python", source=source, time_limit_s=TIME_LIMIT_S)


def _batched(
    backend: Any, programs: list[tuple[str, str, str]], threads: int
) -> tuple[float, list[float], list[Any]]:
    batches = [programs[i : i + BATCH] for i in range(0, len(programs), BATCH)]
    requests = [
        [RunRequest(program=_program(s), stdin_cases=(x,)) for _, s, x in b] for b in batches
    ]
    calls = [lambda r=r: backend.run_batch(r) for r in requests]
    rate_batches, latencies, rows = _closed_loop(calls, threads)
    per_test = [lat for lat, b in zip(latencies, batches, strict=True) for _ in b]
    results = [row[0] for batch_rows in rows for row in batch_rows]
    return rate_batches * len(programs) / len(batches), per_test, results


def _check(kinds: list[str], results: list[Any]) -> dict[str, int]:
    """How many runs behaved as their kind says (answers, timeouts), and sandbox errors."""
    right = errors = 0
    for kind, result in zip(kinds, results, strict=True):
        errors += bool(result.sandbox_error)
        right += (kind == "TLE") == bool(result.timed_out)
    return {"as_expected": right, "sandbox_errors": errors}


def _record(
    bench: Bench,
    label: str,
    subject: tuple[float, list[float]],
    baseline: tuple[float, list[float]],
    baseline_label: str,
) -> None:
    rate, lat = subject
    base_rate, base_lat = baseline
    bench.record(
        f"{label}: tests/s",
        subject=rate,
        baseline=base_rate,
        unit="tests/s",
        higher_is_better=True,
        subject_label=label,
        baseline_label=baseline_label,
    )
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        bench.record(f"{label}: {name} latency", subject=_percentile(lat, q) * 1000,
                     baseline=_percentile(base_lat, q) * 1000, unit="ms", higher_is_better=False,
                     subject_label=label, baseline_label=baseline_label)  # fmt: skip


def run(bench: Bench) -> None:
    """Runs the verify suite."""
    from rlax_verifiers.sandbox.aws_lambda.client import LambdaSandbox, LambdaSandboxConfig
    from rlax_verifiers.sandbox.aws_lambda.local_api import FunctionSettings, LocalLambdaServer
    from rlax_verifiers.sandbox.docker.backend import DockerSandbox, DockerSandboxConfig
    from rlax_verifiers.sandbox.docker.image import ensure_image
    from rlax_verifiers.sandbox.local import LocalSandbox, LocalSandboxConfig

    programs = _programs(100 if bench.quick else 2000)
    kinds = [k for k, _, _ in programs]
    mix = {k: kinds.count(k) for k in ("AC", "WA", "TLE")}
    bench.notes.update(
        {"tests": len(programs), "workers": WORKERS, "time_limit_s": TIME_LIMIT_S, "mix": mix}
    )

    bare_rate, bare_lat, _ = _closed_loop(
        [lambda s=s, x=x: _bare_spawn(s, x) for _, s, x in programs], WORKERS
    )
    bare = (bare_rate, bare_lat)

    local = LocalSandbox(LocalSandboxConfig(workers=WORKERS))
    local.run(_program("print(1)"), [""])  # start the pool: the warm-up is not measured
    rate, lat, results = _closed_loop(
        [lambda s=s, x=x: local.run(_program(s), [x])[0] for _, s, x in programs], WORKERS
    )
    local.close()
    bench.notes["local"] = _check(kinds, results)
    _record(bench, "local", (rate, lat), bare, "python3 -c spawn, no isolation")

    docker = DockerSandbox(DockerSandboxConfig(workers=WORKERS, cpus=WORKERS))
    tag = ensure_image(docker._connect(), "python")
    rate, lat, results = _batched(docker, programs, 1)
    bench.notes["docker"] = _check(kinds, results)
    sample = programs[: 4 if bench.quick else DOCKER_RUN_SAMPLE]
    docker_run = ["docker", "run", "--rm", "-i", "--network", "none", tag, "python3", "-c"]
    run_rate, run_lat, _ = _closed_loop(
        [
            lambda s=s, x=x: subprocess.run(
                [*docker_run, s], input=x, text=True, capture_output=True, timeout=60
            )
            for _, s, x in sample
        ],
        WORKERS,
    )
    bench.notes["docker_run_sample"] = len(sample)
    _record(bench, "docker (batches of 100)", (rate, lat), (run_rate, run_lat),
            f"docker run per test ({len(sample)}-test sample)")  # fmt: skip
    docker.close()

    server = LocalLambdaServer(FunctionSettings(concurrency=WORKERS)).start()
    try:
        lam = LambdaSandbox(LambdaSandboxConfig(endpoint_url=server.endpoint_url, workers=WORKERS,
                                                concurrency=WORKERS))  # fmt: skip
        rate, lat, results = _batched(lam, programs, 1)
        bench.notes["lambda"] = {**_check(kinds, results), "invocations": server.invocations}
        _record(bench, "lambda, local Invoke API (batches of 100)", (rate, lat), bare,
                "python3 -c spawn, no isolation")  # fmt: skip
    finally:
        server.stop()
    bench.notes["bare_p50_ms"] = statistics.median(bare_lat) * 1000
