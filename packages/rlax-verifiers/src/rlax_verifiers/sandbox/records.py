"""Converting between RLAX's records and the plain dicts of the isolate package."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlax_core.contracts.verifier import RunRequest
from rlax_core.types.verdict import ExecutionResult

_RESULT_FIELDS = frozenset(ExecutionResult.model_fields)


def request_to_dict(request: RunRequest) -> dict[str, Any]:
    """A RunRequest as the isolate package's request dict."""
    return {**request.program.model_dump(), "stdin_cases": list(request.stdin_cases)}


def result_from_dict(data: dict[str, Any]) -> ExecutionResult:
    """An ExecutionResult from the isolate package's result dict (extra keys dropped)."""
    return ExecutionResult(**{k: v for k, v in data.items() if k in _RESULT_FIELDS})


def results_from_dicts(rows: Sequence[Sequence[dict[str, Any]]]) -> list[list[ExecutionResult]]:
    """Converts a batch of result rows."""
    return [[result_from_dict(d) for d in row] for row in rows]


def sandbox_errors(requests: Sequence[RunRequest], message: str) -> list[list[ExecutionResult]]:
    """One sandbox-error result per input of every request (the whole batch failed)."""
    return [[ExecutionResult(sandbox_error=message) for _ in r.stdin_cases] for r in requests]
