"""The ``lambda`` sandbox: batches sent to the oubliette function through boto3.

Calls are synchronous invocations with explicit connect and read timeouts and a
connection pool as large as the invocations in flight. botocore's own retries are off:
an invocation is not idempotent (it ran, or may have run, the programs), so a failed
one becomes sandbox errors, which the judge retries and reports. Only throttling (429,
when the function never ran) is retried here, with exponential back-off and jitter. A
batch is split so each request stays under Lambda's 6 MB payload limit (a 413 splits
further); the function keeps its response under the same limit.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import RunRequest, SandboxBackend
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import ExecutionResult
from rlax_verifiers.sandbox.records import request_to_dict, result_from_dict

PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024


class LambdaSandboxConfig(BaseModel):
    """AWS Lambda ("oubliette"): batches run by a Lambda function, through boto3."""

    model_config = ConfigDict(extra="forbid")

    function_name: str = Field(default="oubliette", description="The function to invoke.")
    region: str = Field(default="us-east-1", description="AWS region of the function.")
    endpoint_url: str | None = Field(
        default=None, description="Invoke API endpoint instead of AWS's (e.g. the local one)."
    )
    workers: int = Field(default=2, ge=1, description="Programs run at once in an invocation.")
    concurrency: int = Field(default=4, ge=1, description="Invocations in flight (pool size).")
    runs_per_invocation: int = Field(default=256, ge=1, description="Most runs per invocation.")
    connect_timeout_s: float = Field(default=5.0, gt=0, description="TCP connect timeout.")
    read_timeout_s: float = Field(
        default=900.0, gt=0, description="Response timeout; at least the function's timeout."
    )
    throttle_retries: int = Field(default=8, ge=0, description="Retries of a throttled call.")
    throttle_backoff_s: float = Field(
        default=0.1, gt=0, description="First back-off after a 429; doubles, up to 5 s."
    )
    compile_time_limit_s: float = Field(default=15.0, gt=0, description="C++ compile limit.")
    payload_limit_bytes: int = Field(
        default=PAYLOAD_LIMIT_BYTES - (64 << 10), ge=1024,
        description="Largest request sent (Lambda's sync limit is 6 MB).",
    )  # fmt: skip


@dataclass
class _Unit:
    """Some inputs of one request: the smallest thing placed in an invocation."""

    request: int
    cases: list[int]
    body: dict[str, Any]
    size: int


class LambdaSandbox(SandboxBackend):
    """Runs batches through the oubliette function."""

    def __init__(self, config: LambdaSandboxConfig | None = None) -> None:
        self.config = config or LambdaSandboxConfig()
        self._client: Any = None
        self.throttled = 0  # 429s seen (and waited out)

    def run_batch(self, requests: Sequence[RunRequest]) -> list[list[ExecutionResult]]:
        """Packs the batch into invocations, runs them ``concurrency`` at a time."""
        rows: list[list[ExecutionResult | None]] = [[None] * len(r.stdin_cases) for r in requests]
        units, oversized = self._units(requests)
        for unit in oversized:
            for case in unit.cases:
                rows[unit.request][case] = ExecutionResult(
                    sandbox_error="this input alone exceeds Lambda's 6 MB payload limit"
                )
        client = self._connect()
        with ThreadPoolExecutor(self.config.concurrency) as executor:
            done = executor.map(lambda g: (g, self._invoke(client, g)), self._pack(units))
            for group, results in done:
                for unit, unit_results in zip(group, results, strict=True):
                    for case, result in zip(unit.cases, unit_results, strict=True):
                        rows[unit.request][case] = result
        return [[r or ExecutionResult(sandbox_error="not run") for r in row] for row in rows]

    def close(self) -> None:
        """Drops the boto3 client (its connection pool)."""
        self._client = None

    def _connect(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            c = self.config
            session = boto3.session.Session()
            credentials = {}
            if c.endpoint_url and session.get_credentials() is None:
                # A local Invoke API checks no signature, but botocore must sign something.
                credentials = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
            self._client = session.client(
                "lambda", region_name=c.region, endpoint_url=c.endpoint_url,
                config=Config(
                    connect_timeout=c.connect_timeout_s, read_timeout=c.read_timeout_s,
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    max_pool_connections=c.concurrency, tcp_keepalive=True,
                ),
                **credentials,
            )  # fmt: skip
        return self._client

    def _units(self, requests: Sequence[RunRequest]) -> tuple[list[_Unit], list[_Unit]]:
        limit = self.config.payload_limit_bytes - 1024  # room for the envelope
        units, oversized = [], []
        for index, request in enumerate(requests):
            pending: list[int] = []
            for case in range(len(request.stdin_cases)):
                candidate = self._unit(index, request, [*pending, case])
                if pending and (
                    candidate.size > limit or len(pending) >= self.config.runs_per_invocation
                ):
                    units.append(self._unit(index, request, pending))
                    pending = []
                pending.append(case)
            if pending:
                unit = self._unit(index, request, pending)
                (oversized if unit.size > limit else units).append(unit)
        return units, oversized

    @staticmethod
    def _unit(index: int, request: RunRequest, cases: list[int]) -> _Unit:
        body = request_to_dict(request)
        body["stdin_cases"] = [request.stdin_cases[i] for i in cases]
        return _Unit(index, cases, body, len(json.dumps(body)))

    def _pack(self, units: list[_Unit]) -> list[list[_Unit]]:
        groups: list[list[_Unit]] = []
        size = runs = 0
        for unit in units:
            if (not groups or size + unit.size > self.config.payload_limit_bytes - 1024
                    or runs + len(unit.cases) > self.config.runs_per_invocation):  # fmt: skip
                groups.append([])
                size = runs = 0
            groups[-1].append(unit)
            size += unit.size
            runs += len(unit.cases)
        return groups

    def _invoke(self, client: Any, group: list[_Unit]) -> list[list[ExecutionResult]]:
        from botocore.exceptions import BotoCoreError, ClientError

        c = self.config
        payload = json.dumps({
            "requests": [u.body for u in group],
            "settings": {"compile_time_limit_s": c.compile_time_limit_s},
            "workers": c.workers,
        }).encode()  # fmt: skip
        backoff = c.throttle_backoff_s
        for attempt in range(c.throttle_retries + 1):
            try:
                response = client.invoke(FunctionName=c.function_name, Payload=payload)
                break
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code == "TooManyRequestsException" and attempt < c.throttle_retries:
                    self.throttled += 1
                    time.sleep(backoff * (0.5 + random.random()))
                    backoff = min(backoff * 2, 5.0)
                    continue
                if code == "RequestEntityTooLargeException" and len(group) > 1:
                    half = len(group) // 2
                    return self._invoke(client, group[:half]) + self._invoke(client, group[half:])
                return _errors(group, f"lambda invoke failed: {code or exc}")
            except BotoCoreError as exc:  # timeouts, connection errors: not retried
                return _errors(group, f"lambda invoke failed: {type(exc).__name__}: {exc}")
        body = response["Payload"].read()
        if response.get("FunctionError"):
            try:
                detail = json.loads(body).get("errorMessage", "")
            except (ValueError, AttributeError):
                detail = body[:300].decode(errors="replace")
            return _errors(group, f"the oubliette function failed: {detail}")
        results = json.loads(body)["results"]
        return [[result_from_dict(r) for r in row] for row in results]


def _errors(group: list[_Unit], message: str) -> list[list[ExecutionResult]]:
    return [[ExecutionResult(sandbox_error=message) for _ in unit.cases] for unit in group]


def make_lambda_sandbox(config: LambdaSandboxConfig, context: BuildContext) -> LambdaSandbox:
    """Builds the lambda sandbox (boto3 client created on first use)."""
    return LambdaSandbox(config)
