# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""The lambda sandbox through boto3 against the local Lambda Invoke API, run for real."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from rlax_core.contracts.verifier import Program, RunRequest
from rlax_core.types.verdict import VerdictStatus
from rlax_verifiers.code.judge import CodeJudge
from rlax_verifiers.sandbox.aws_lambda.client import LambdaSandbox, LambdaSandboxConfig
from rlax_verifiers.sandbox.aws_lambda.local_api import FunctionSettings, LocalLambdaServer
from rlax_verifiers.testing.host_checks import host_processes_of
from rlax_verifiers.testing.hostile import judge_canaries, judge_hostile_suite, mismatches

pytestmark = [pytest.mark.network, pytest.mark.slow]
SANDBOX_UIDS = range(100_000, 1 << 32)  # the random uid blocks of the handler's slots


@pytest.fixture(scope="module")
def server() -> Iterator[LocalLambdaServer]:
    server = LocalLambdaServer(FunctionSettings(concurrency=4, timeout_s=60)).start()
    yield server
    server.stop()


def _sandbox(server: LocalLambdaServer, **settings: object) -> LambdaSandbox:
    return LambdaSandbox(
        LambdaSandboxConfig(
            endpoint_url=server.endpoint_url,
            compile_time_limit_s=5.0,
            **settings,  # type: ignore[arg-type]
        )
    )


def test_hostile_programs_get_their_verdicts_on_lambda(
    server: LocalLambdaServer, host_port: int
) -> None:
    judge = CodeJudge(_sandbox(server, runs_per_invocation=16))
    assert mismatches(judge_hostile_suite(judge, port=host_port)) == []
    assert host_processes_of(SANDBOX_UIDS) == []
    canaries = judge_canaries(judge)
    assert [v.status for v in canaries] == [VerdictStatus.AC] * len(canaries)


def test_an_invocation_sees_a_fresh_read_only_world(server: LocalLambdaServer) -> None:
    sandbox = _sandbox(server)
    writer = Program(
        language="python", source="open('/tmp/left-behind', 'w').write('x')\nprint('ok')"
    )
    assert sandbox.run(writer, [""])[0].stdout == "ok\n"
    probe = r"""
import os
def writable(path):
    try:
        open(path, "w").close()
        return True
    except OSError:
        return False
print(sorted(e for e in os.listdir("/tmp") if not e.startswith("oubliette-")), writable("/usr/x"),
      sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]), os.path.exists("/work"))
"""
    (result,) = sandbox.run(Program(language="python", source=probe), [""])
    assert result.stdout == "[] False ['lo'] False\n", result.stderr


def test_big_batches_are_split_under_the_payload_limit(server: LocalLambdaServer) -> None:
    sandbox = _sandbox(server, payload_limit_bytes=300_000)
    program = Program(language="python", source="import sys\nprint(len(sys.stdin.read()))")
    inputs = [str(i) * 100_000 for i in range(6)]  # 100 kB each: 2 per invocation
    before = server.invocations
    results = sandbox.run(program, inputs)
    assert [r.stdout for r in results] == ["100000\n"] * 6
    assert server.invocations - before == 3
    too_big = sandbox.run(program, ["x" * 400_000])
    assert "exceeds Lambda's 6 MB payload limit" in (too_big[0].sandbox_error or "")


def test_throttled_invocations_back_off_and_succeed(server: LocalLambdaServer) -> None:
    sandbox = _sandbox(server, concurrency=8, runs_per_invocation=1, throttle_backoff_s=0.05)
    program = Program(language="python", source="import time\ntime.sleep(0.4)\nprint('done')")
    requests = [RunRequest(program=program, stdin_cases=("",)) for _ in range(8)]
    rows = sandbox.run_batch(requests)
    assert [row[0].stdout for row in rows] == ["done\n"] * 8
    assert sandbox.throttled > 0  # 8 calls in flight, the function allows 4


def test_function_errors_and_http_errors_are_sandbox_errors(server: LocalLambdaServer) -> None:
    url = f"{server.endpoint_url}/2015-03-31/functions/oubliette/invocations"
    response = urllib.request.urlopen(urllib.request.Request(url, data=b'{"requests": 7}'))
    assert response.status == 200 and response.headers["X-Amz-Function-Error"] == "Unhandled"
    assert json.loads(response.read())["errorType"] == "TypeError"
    with pytest.raises(urllib.error.HTTPError) as too_large:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x" * (6 * 1024 * 1024 + 1)))
    assert too_large.value.code == 413
    assert too_large.value.headers["x-amzn-ErrorType"] == "RequestEntityTooLargeException"
    missing = LambdaSandbox(
        LambdaSandboxConfig(endpoint_url=server.endpoint_url, function_name="nope")
    )
    (result,) = missing.run(Program(language="python", source="print(1)"), [""])
    assert "ResourceNotFoundException" in (result.sandbox_error or "")


def test_concurrency_above_the_limit_gets_429(server: LocalLambdaServer) -> None:
    url = f"{server.endpoint_url}/2015-03-31/functions/oubliette/invocations"
    body = json.dumps(
        {
            "requests": [
                {
                    "language": "python",
                    "source": "import time\ntime.sleep(1)",
                    "time_limit_s": 2,
                    "memory_limit_mb": 256,
                    "output_limit_bytes": 1024,
                    "stdin_cases": [""],
                }
            ]
        }
    ).encode()
    statuses: list[int] = []

    def call() -> None:
        try:
            statuses.append(urllib.request.urlopen(urllib.request.Request(url, data=body)).status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 4 + [429] * 2
