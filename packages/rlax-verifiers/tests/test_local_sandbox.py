# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""The local sandbox, run for real: isolation, limits, capture, compile, recovery."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from rlax_core.contracts.verifier import Program, RunRequest
from rlax_verifiers.sandbox.local import LocalSandbox
from rlax_verifiers.testing.host_checks import host_processes_of

FIRST_UID, WORKERS = 62000, 2  # as in conftest's local_sandbox

PROBE = r"""
import json, os, resource, socket
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
def can_read(path):
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        return True
    except OSError:
        return False
def can_connect(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "env": dict(os.environ),
    "cwd": os.getcwd(), "cwd_entries": os.listdir("."), "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(), "pgid_is_pid": os.getpgid(0) == os.getpid(),
    "interfaces": sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC), "core": resource.getrlimit(resource.RLIMIT_CORE),
    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE), "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "cpu": resource.getrlimit(resource.RLIMIT_CPU), "as": resource.getrlimit(resource.RLIMIT_AS),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "read_root": can_read("/root"), "read_work": can_read("/work"), "read_home": can_read("/home"),
    "host_port": can_connect("127.0.0.1", PORT), "stdin": open(0).read(),
}))
"""


def _python(source: str, **limits: object) -> Program:
    return Program(language="python", source=source, **limits)  # type: ignore[arg-type]


def test_a_run_is_isolated(local_sandbox: LocalSandbox, host_port: int, monkeypatch) -> None:
    monkeypatch.setenv("RLAX_HOST_SECRET", "do-not-leak")
    (result,) = local_sandbox.run(_python(PROBE.replace("PORT", str(host_port))), ["the input"])
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stdout)
    assert FIRST_UID <= facts["uid"] < FIRST_UID + WORKERS
    assert facts["gid"] == facts["uid"] and facts["groups"] == []
    assert facts["env"] == {}
    assert facts["cwd"].startswith("/sandbox/run-") and facts["cwd_entries"] == ["main.py"]
    assert facts["cap_eff"] == "0000000000000000" and facts["no_new_privs"] == "1"
    assert facts["pgid_is_pid"]
    assert facts["interfaces"] == ["lo"]  # a new network namespace: nothing but loopback
    assert not facts["host_port"]
    assert len(facts["pids"]) <= 3  # its own pid namespace: bwrap, the zygote and the run
    assert facts["nproc"] == [32, 32] and facts["core"] == [0, 0]
    assert facts["fsize"] == [16 << 20] * 2 and facts["nofile"] == [64, 64]
    assert facts["cpu"] == [3, 4] and facts["as"][0] < 1 << 30
    assert facts["fds"] == [0, 1, 2, 3]  # 3 is the probe's own listdir
    assert not facts["read_root"] and not facts["read_work"]
    assert facts["stdin"] == "the input"


def test_output_is_capped_and_the_run_killed(local_sandbox: LocalSandbox) -> None:
    program = _python("import sys\nprint('x' * 5000)\nsys.stderr.write('e' * 10)\nwhile True: print('y')",
                      output_limit_bytes=4096)  # fmt: skip
    (result,) = local_sandbox.run(program, [""])
    assert result.stdout_truncated and len(result.stdout) == 4096
    assert result.signal == signal.SIGKILL and not result.timed_out
    assert result.wall_s < 1.5  # killed at the cap, not at the time limit


def test_stderr_past_its_cap_keeps_its_tail_and_the_run_goes_on(
    local_sandbox: LocalSandbox,
) -> None:
    source = "import sys\nsys.stderr.write('e' * 100000 + 'THE END')\nprint(42)"
    (result,) = local_sandbox.run(_python(source, output_limit_bytes=4096), [""])
    assert result.exit_code == 0 and result.stdout == "42\n" and not result.stdout_truncated
    assert result.stderr_truncated and len(result.stderr) == 4096
    assert result.stderr.endswith("THE END")


def test_wall_limit_kills_the_whole_group(local_sandbox: LocalSandbox) -> None:
    program = _python(
        "import os, time\nos.fork()\nos.fork()\nprint('started', flush=True)\ntime.sleep(60)",
        time_limit_s=0.5,
    )
    started = time.monotonic()
    (result,) = local_sandbox.run(program, [""])
    assert result.timed_out and result.signal == signal.SIGKILL
    assert 0.5 <= result.wall_s < 1.5 and time.monotonic() - started < 5
    assert result.stdout.count("started") == 4
    assert host_processes_of(range(FIRST_UID, FIRST_UID + WORKERS)) == []


def test_the_result_channel_is_separate_from_stdout(local_sandbox: LocalSandbox) -> None:
    program = _python("import os\nprint('out')\nos.write(3, b'channel')", result_channel=True)
    (result,) = local_sandbox.run(program, [""])
    assert (result.stdout, result.channel) == ("out\n", "channel")
    (closed,) = local_sandbox.run(_python("import os\nos.write(3, b'x')"), [""])
    assert closed.exit_code == 1 and "Bad file descriptor" in closed.stderr


def test_cpp_compiles_once_and_runs_every_input(local_sandbox: LocalSandbox) -> None:
    source = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a*b<<'\\n';}"
    results = local_sandbox.run(Program(language="cpp", source=source), ["6 7", "-2 5", "0 9"])
    assert [r.stdout for r in results] == ["42\n", "-10\n", "0\n"]
    assert all(r.stage == "run" and r.exit_code == 0 for r in results)
    broken = local_sandbox.run(Program(language="cpp", source="int main( {"), ["1", "2"])
    assert [r.stage for r in broken] == ["compile", "compile"]
    assert broken[0].exit_code != 0 and "error" in broken[0].stderr


def test_runs_of_one_batch_spread_over_the_slots(local_sandbox: LocalSandbox) -> None:
    program = _python("import os, time\ntime.sleep(0.3)\nprint(os.getuid())")
    started = time.monotonic()
    rows = local_sandbox.run_batch([RunRequest(program=program, stdin_cases=("",) * 4)])
    assert time.monotonic() - started < 1.1  # 4 runs of 0.3 s on 2 slots
    assert {int(r.stdout) for r in rows[0]} == {FIRST_UID, FIRST_UID + 1}


def test_a_dead_zygote_is_a_sandbox_error_and_the_slot_recovers(
    local_sandbox: LocalSandbox,
) -> None:
    local_sandbox.run(_python("print(1)"), [""])  # make sure the pool is up
    pool = local_sandbox._pool
    assert pool is not None
    for slot in pool.slots:
        assert slot.process is not None
        _kill_tree(slot.process.pid)
    results = local_sandbox.run(_python("print(1)"), ["", ""])
    assert all(r.sandbox_error and "zygote" in r.sandbox_error for r in results)
    assert [r.stdout for r in local_sandbox.run(_python("print(2)"), ["", ""])] == ["2\n", "2\n"]


def _kill_tree(root: int) -> None:
    """SIGKILLs ``root`` and every descendant (bwrap, the namespace's init, the zygote)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(
                    Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except OSError:
                continue
    tree, grew = {root}, True
    while grew:
        new = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= new
        grew = bool(new)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):  # it may have just exited
            os.kill(pid, signal.SIGKILL)


def test_nothing_is_written_outside_the_sandbox(local_sandbox: LocalSandbox) -> None:
    probe = "open('/tmp/rlax-probe-file', 'w').write('x')\nopen('rlax-probe-file', 'w').write('x')"
    (result,) = local_sandbox.run(_python(probe), [""])
    assert result.exit_code == 0, result.stderr
    assert not Path("/tmp/rlax-probe-file").exists()
    root = local_sandbox._root
    assert root is not None and list(root.glob("slot-*/run-*")) == []
    assert list(root.glob("slot-*/tmp/*")) == []
