"""Running a batch of programs on a pool: compile C++ once per program, then every input.

Requests and results are plain dicts (the fields of ``rlax_core``'s ``RunRequest`` and
``ExecutionResult``), because this package runs where RLAX is not installed. Runs are
spread over the pool's slots by a thread per slot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .pool import Pool, RunSpec

SETTINGS: dict[str, Any] = {
    "processes": 32,  # per run; counts threads too
    "open_files": 64,
    "file_size_mb": 16,
    "stack_mb": 256,
    "compile_time_limit_s": 15.0,
    "compile_memory_mb": 2048,
    "compile_output_bytes": 64 << 10,
    "cxx": "/usr/bin/g++",
    "cxx_flags": ["-std=c++17", "-O2", "-pipe"],
}


def run_batch(
    pool: Pool, requests: Sequence[dict[str, Any]], settings: dict[str, Any] | None = None
) -> list[list[dict[str, Any]]]:
    """Runs every request on every one of its stdin inputs; results in request order."""
    settings = {**SETTINGS, **(settings or {})}
    workers = max(1, len(pool.slots))
    with ThreadPoolExecutor(workers, thread_name_prefix="rlax-sandbox") as executor:
        binaries: list[Any] = [None] * len(requests)
        compiles = {
            i: executor.submit(pool.execute, _compile_spec(r, settings))
            for i, r in enumerate(requests)
            if r["language"] == "cpp"
        }
        for i, future in compiles.items():
            binaries[i] = future.result()
        futures: list[list[Any]] = []
        for i, request in enumerate(requests):
            compiled = binaries[i]
            if compiled is not None and compiled.get("collected") is None:
                futures.append([_compile_failure(compiled)] * len(request["stdin_cases"]))
                continue
            futures.append(
                [
                    executor.submit(pool.execute, _run_spec(request, stdin, compiled, settings))
                    for stdin in request["stdin_cases"]
                ]
            )
        return [[_result(f) for f in row] for row in futures]


def _limits(request: dict[str, Any], settings: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    limits = {
        "cpu_s": math.ceil(request["time_limit_s"]) + 1,
        "address_space_mb": request["memory_limit_mb"],
        "processes": settings["processes"],
        "open_files": settings["open_files"],
        "file_size_mb": settings["file_size_mb"],
        "stack_mb": min(settings["stack_mb"], request["memory_limit_mb"]),
    }
    limits.update(overrides)
    return limits


def _run_spec(
    request: dict[str, Any], stdin: str, compiled: dict[str, Any] | None, settings: dict[str, Any]
) -> RunSpec:
    common = {
        "stdin": stdin.encode("utf-8", errors="surrogateescape"),
        "wall_s": float(request["time_limit_s"]),
        "limits": _limits(request, settings),
        "output_limit_bytes": int(request["output_limit_bytes"]),
        "channel": bool(request.get("result_channel", False)),
    }
    if compiled is not None:
        return RunSpec(
            mode="exec", files={"main": (compiled["collected"], 0o755)}, argv=["./main"], **common
        )
    return RunSpec(mode="python", files={"main.py": (request["source"].encode(), 0o644)}, **common)


def _compile_spec(request: dict[str, Any], settings: dict[str, Any]) -> RunSpec:
    limit_s = float(settings["compile_time_limit_s"])
    return RunSpec(
        mode="exec",
        files={"main.cpp": (request["source"].encode(), 0o644)},
        stdin=b"",
        wall_s=limit_s,
        limits=_limits(
            request,
            settings,
            cpu_s=math.ceil(limit_s) + 1,
            address_space_mb=settings["compile_memory_mb"],
            file_size_mb=64,
            stack_mb=64,
        ),
        output_limit_bytes=int(settings["compile_output_bytes"]),
        argv=[settings["cxx"], *settings["cxx_flags"], "-o", "main", "main.cpp"],
        env={"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp"},
        collect="main",
    )


def _compile_failure(compiled: dict[str, Any]) -> dict[str, Any]:
    failure = {k: v for k, v in compiled.items() if k != "collected"}
    failure["stage"] = "compile"
    if not failure.get("sandbox_error") and failure.get("exit_code") == 0:
        failure["exit_code"] = 1  # compiled "successfully" but produced no usable binary
        failure["stderr"] = (failure.get("stderr") or "") + "\n(no binary was produced)"
    return failure


def _result(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else item.result()
