# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""The docker sandbox against a real engine: the image, the container's locks, the suite."""

from __future__ import annotations

import json

import docker
import pytest

from rlax_core.contracts.verifier import Program, RunRequest
from rlax_core.types.verdict import VerdictStatus
from rlax_verifiers.code.judge import CodeJudge
from rlax_verifiers.sandbox.docker.backend import DockerSandbox, _split
from rlax_verifiers.sandbox.docker.image import ensure_image, image_tag
from rlax_verifiers.testing.hostile import judge_canaries, judge_hostile_suite, mismatches

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PROBE = r"""
import json, os
def writable(path):
    try:
        open(path, "w").close()
        return True
    except OSError:
        return False
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print(json.dumps({
    "uid": os.getuid(), "env": dict(os.environ), "cwd": os.getcwd(),
    "interfaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]),
    "root_writable": writable("/etc/rlax") or writable("/rlax"), "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
}))
"""


def test_the_image_is_built_once_and_then_found_by_its_tag() -> None:
    client = docker.from_env()
    tag = ensure_image(client, "python")
    assert tag == image_tag("python") and tag.startswith("rlax-sandbox:python-")
    assert ensure_image(client, "python") == tag  # cached: a lookup, not a build
    assert "/opt/rlax/isolate/zygote.py" in client.containers.run(
        tag, ["/usr/bin/python3", "-c", "import glob; print(glob.glob('/opt/rlax/isolate/*'))"],
        remove=True, network_disabled=True,
    ).decode()  # fmt: skip


def test_a_run_in_the_container_is_locked_down(docker_sandbox: DockerSandbox) -> None:
    (result,) = docker_sandbox.run(Program(language="python", source=PROBE), [""])
    assert result.exit_code == 0, result.stderr or result.sandbox_error
    facts = json.loads(result.stdout)
    assert facts["uid"] >= 62000 and facts["env"] == {}
    assert facts["cwd"].startswith("/sandbox/slot-")
    assert facts["interfaces"] == ["lo"] and not facts["root_writable"]
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert docker.from_env().containers.list(all=True, filters={"label": "rlax"}) == []


def test_big_batches_are_split_over_containers() -> None:
    program = Program(language="python", source="print(1)")
    requests = [RunRequest(program=program, stdin_cases=("",) * n) for n in (3, 2, 4, 1)]
    assert [[len(r.stdin_cases) for r in g] for g in _split(requests, 5)] == [[3, 2], [4, 1]]
    assert [[len(r.stdin_cases) for r in g] for g in _split(requests, 2)] == [[3], [2], [4], [1]]


def test_hostile_programs_get_their_verdicts_in_docker(
    docker_sandbox: DockerSandbox, host_port: int
) -> None:
    judge = CodeJudge(docker_sandbox)
    assert mismatches(judge_hostile_suite(judge, port=host_port)) == []
    assert docker.from_env().containers.list(all=True, filters={"label": "rlax"}) == []
    canaries = judge_canaries(judge)
    assert [v.status for v in canaries] == [VerdictStatus.AC] * len(canaries), [
        v.message for v in canaries
    ]
