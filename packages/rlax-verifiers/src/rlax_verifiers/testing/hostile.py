"""The hostile-input suite: programs that attack the judge, and the verdict each must get.

One table, shared by every sandbox backend: a backend's tests judge all of
:data:`HOSTILE_PROGRAMS` in one batch (:func:`judge_hostile_suite`), compare each
verdict with the required one, then check that later runs are unharmed
(:func:`judge_canaries`) and, on the host side, that nothing was left running or
written. ``{port}`` in a program is replaced by a TCP port the host listens on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlax_core.contracts.verifier import Judge
from rlax_core.types.verdict import Verdict, VerdictStatus
from rlax_verifiers.testing.hostile_problems import CANARIES, make_problems

AC, WA, TLE, MLE, RE, CE, OLE = (VerdictStatus(v) for v in ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE"))


@dataclass(frozen=True)
class HostileProgram:
    """A program, the problem it is judged on, and the verdict it must get."""

    name: str
    category: str
    problem: str
    code: str
    verdict: VerdictStatus


def _p(name: str, category: str, problem: str, verdict: VerdictStatus, code: str) -> HostileProgram:
    return HostileProgram(name, category, problem, code.strip("\n") + "\n", verdict)


_EXITS = [
    _p("exit_zero_before_answer", "early exit", "double", WA, "import sys\nsys.exit(0)\nprint(42)"),
    _p("os_exit_zero_before_call", "early exit", "add_call", RE,
       "import os\nos._exit(0)\ndef add(a, b):\n    return a + b"),
    _p("raise_systemexit_before_asserts", "early exit", "add_assert", RE,
       "def add(a, b):\n    return 0\nraise SystemExit"),
    _p("atexit_os_exit_after_failed_asserts", "early exit", "add_assert", WA,
       "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0"),
    _p("atexit_os_exit_with_wrong_result", "early exit", "add_call", WA,
       "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0"),
    _p("systemexit_inside_function", "early exit", "add_call", RE,
       "def add(a, b):\n    raise SystemExit(0)"),
    _p("os_exit_inside_asserted_function", "early exit", "add_assert", RE,
       "import os\ndef add(a, b):\n    os._exit(0)"),
]

_ALWAYS_EQUAL = r'''
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return AlwaysEqual()
'''
_INT_EQUAL = "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)"

_EQUALITY = [
    _p("always_equal_object_call", "always equal", "add_call", WA, _ALWAYS_EQUAL),
    _p("int_subclass_equal_call", "always equal", "add_call", WA, _INT_EQUAL),
    _p("always_equal_object_assert", "always equal", "add_assert", WA, _ALWAYS_EQUAL),
    _p("int_subclass_equal_assert", "always equal", "add_assert", WA, _INT_EQUAL),
]

_TAMPERING = [
    _p("patch_builtin_print", "harness tampering", "double", WA,
       "import builtins\nbuiltins.print = lambda *a, **k: None\nprint(42)"),
    _p("forge_result_on_fd3", "harness tampering", "add_call", RE,
       "import os\nos.write(3, b'{\"ok\": true, \"result\": 3}')\nos._exit(0)\ndef add(a, b):\n    return 0"),
    _p("forge_result_via_parent_proc", "harness tampering", "add_call", RE, r'''
import os
for fd in os.listdir(f"/proc/{os.getppid()}/fd") if os.access(f"/proc/{os.getppid()}/fd", os.R_OK) else []:
    try:
        os.write(os.open(f"/proc/{os.getppid()}/fd/{fd}", os.O_WRONLY), b'{"ok": true, "result": 3}')
    except OSError:
        pass
os._exit(0)
'''),
    _p("patch_harness_send", "harness tampering", "add_assert", WA,
       "import __main__\n__main__._send = lambda fd, message: None\ndef add(a, b):\n    return 0"),
    _p("patch_assertion_error", "harness tampering", "add_assert", WA,
       "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\ndef add(a, b):\n    return 0"),
    _p("sitecustomize_and_conftest_drop", "harness tampering", "double", WA, r'''
import os
payload = "import os\nos.environ['PWNED'] = '1'\nprint(42)\n"
for folder in (".", "/tmp", "/dev/shm"):
    for name in ("sitecustomize.py", "usercustomize.py", "conftest.py", "json.py"):
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(payload)
        except OSError:
            pass
print(41)
'''),
    _p("shadow_json_module", "harness tampering", "add_call", WA, r'''
import importlib, json
with open("json.py", "w") as f:
    f.write("def dumps(*a, **k):\n    return '{\"ok\": true, \"result\": 3}'\ndef loads(s):\n    return 3\n")
importlib.reload(json)
def add(a, b):
    return 0
'''),
]

_READING = [
    _p("read_parent_proc", "reading answers", "secret", WA, r'''
import os
for pid in ("1", str(os.getppid())):
    for name in ("environ", "cmdline", "maps", "mem", "fd"):
        try:
            path = f"/proc/{pid}/{name}"
            print(os.listdir(path) if name == "fd" else open(path, "rb").read(4096))
        except OSError as exc:
            print(type(exc).__name__)
'''),
    _p("frame_walking_and_gc_scan", "reading answers", "secret", WA, r'''
import gc, sys
found = [o for o in gc.get_objects() if isinstance(o, str) and "rlax-secret-" in o and o != "rlax-secret-"]
frame, seen = sys._getframe(), []
while frame is not None:
    seen.append(repr(frame.f_globals.keys()))
    frame = frame.f_back
print(found[0] if found else "nothing found")
'''),
    _p("other_runs_files", "reading answers", "secret", WA, r'''
import os
found = []
for top in ("/sandbox", "/tmp", "/dev/shm", "/opt", "/var", "/root", "/home", ".."):
    for folder, dirs, files in os.walk(top):
        for name in files:
            try:
                data = open(os.path.join(folder, name), "rb").read(1 << 16)
            except OSError:
                continue
            if b"rlax-secret-" in data:
                found.append(data.split(b"rlax-secret-")[1][:24])
print(b"rlax-secret-" + found[0] if found else "nothing found")
'''),
]

_OUTPUT = [
    _p("endless_print", "output bomb", "double", OLE, "while True:\n    print('y' * 1000)"),
    _p("huge_stderr", "output bomb", "double", OLE,
       "import sys\nwhile True:\n    sys.stderr.write('e' * 10000)"),
    _p("single_huge_line", "output bomb", "double", OLE, "print('9' * 10**7)"),
    _p("invalid_utf8", "output bomb", "double", WA, "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe42\\n')"),
    _p("nul_bytes", "output bomb", "double", WA, "print('4\\x002')"),
]

_PROCESSES = [
    _p("fork_bomb", "fork bomb", "double", RE, "import os\nwhile True:\n    os.fork()"),
    _p("fork_bomb_ignoring_errors", "fork bomb", "double", TLE,
       "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
    _p("thread_bomb", "fork bomb", "double", RE, r'''
import threading, time
while True:
    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
'''),
    _p("setsid_double_fork_daemon", "daemon", "double", AC, r'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(30)
        open("/tmp/daemon-survived", "w").write("yes")
    os._exit(0)
print(42)
'''),
    _p("ignored_signals_busy_loop", "signals", "double", TLE, r'''
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):
    signal.signal(s, signal.SIG_IGN)
while True:
    pass
'''),
    _p("sleep", "time", "double", TLE, "import time\ntime.sleep(100)\nprint(42)"),
    _p("gil_holding_bigint", "time", "double", TLE, "x = 10 ** (10 ** 8)\nprint(42)"),
]

_RESOURCES = [
    _p("huge_allocation", "memory bomb", "double_slow", MLE, "x = bytearray(8 * 1024**3)\nprint(42)"),
    _p("growing_list", "memory bomb", "double_slow", MLE,
       "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))"),
    _p("one_huge_file", "disk filling", "zero_slow", RE,
       "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))"),
    _p("many_files", "disk filling", "zero_slow", RE,
       "i = 0\nwhile True:\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * (8 << 20))\n    i += 1"),
    _p("internet_access", "network", "double", RE,
       "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint(42)"),
    _p("host_loopback_access", "network", "double", RE,
       "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint(42)"),
    _p("dns_lookup", "network", "double", RE, "import socket\nsocket.getaddrinfo('example.com', 80)\nprint(42)"),
    _p("credentials_and_environment", "credentials", "secret", WA, r'''
import os
print(dict(os.environ))
for path in ("/root/.aws/credentials", "/etc/shadow", "/root/.ssh/id_rsa", "/proc/1/environ",
             "/run/secrets", "/var/run/secrets/kubernetes.io/serviceaccount/token"):
    try:
        print(path, open(path, "rb").read(200))
    except OSError as exc:
        print(path, type(exc).__name__)
'''),
    _p("writes_outside_work_dir", "filesystem", "zero", AC, r'''
import os
written = 0
for path in ("/usr/rlax-escape", "/etc/rlax-escape", "/opt/rlax/isolate/rlax-escape", "/rlax-escape",
             "/root/rlax-escape", "../rlax-escape", "/proc/sys/kernel/hostname", "/bin/rlax-escape"):
    try:
        with open(path, "w") as f:
            f.write("escaped")
        written += 1
    except OSError:
        pass
print(written, end="")
'''),
]

_CPP = [
    _p("cpp_include_dev_urandom", "compile bomb", "double_cpp", CE, '#include "/dev/urandom"\nint main(){}'),
    _p("cpp_template_explosion", "compile bomb", "double_cpp", CE, r'''
template<int N, int M> struct F { enum { v = F<N-1, M>::v + F<N-1, M+1>::v }; };
template<int M> struct F<0, M> { enum { v = 1 }; };
int main() { return F<40, 0>::v; }
'''),
    _p("cpp_infinite_loop", "time", "double_cpp", TLE, "int main(){ volatile int x = 0; while (true) x++; }"),
    _p("cpp_segfault", "crash", "double_cpp", RE, "int main(){ volatile int *p = nullptr; return *p; }"),
    _p("cpp_huge_allocation", "memory bomb", "double_cpp", MLE,
       "#include <vector>\n#include <cstdio>\nint main(){ std::vector<char> v(8ULL << 30, 1); printf(\"%d\\n\", v[7]); }"),
]

_CORRECT = [
    _p("stdin_buffer", "unusual but correct", "double", AC, "import sys\nprint(int(sys.stdin.buffer.read()) * 2)"),
    _p("open_fd_zero", "unusual but correct", "double", AC, "print(int(open(0).read()) * 2)"),
    _p("deep_recursion", "unusual but correct", "double", AC, r'''
import sys
sys.setrecursionlimit(10**6)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
print(depth(100000) // 100000 * 2 * int(input()))
'''),
    _p("no_trailing_newline", "unusual but correct", "double", AC, "print(int(input()) * 2, end='')"),
    _p("extra_spaces", "unusual but correct", "double", AC, "print('  ', int(input()) * 2, '   ')"),
    _p("worker_thread", "unusual but correct", "double", AC, r'''
import threading
out = []
t = threading.Thread(target=lambda: out.append(int(input()) * 2))
t.start(); t.join()
print(out[0])
'''),
    _p("main_guard", "unusual but correct", "double", AC,
       "def main():\n    print(int(input()) * 2)\n\nif __name__ == '__main__':\n    main()"),
    _p("subprocess_child", "unusual but correct", "double", AC, r'''
import subprocess, sys
n = int(input())
print(subprocess.run([sys.executable, "-c", f"print({n} * 2)"], capture_output=True, text=True).stdout.strip())
'''),
    _p("leetcode_solution_class", "unusual but correct", "add_call", AC,
       "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"),
    _p("assert_with_helpers", "unusual but correct", "add_assert", AC,
       "from functools import reduce\ndef add(a, b):\n    return reduce(lambda x, y: x + y, [a, b])"),
    _p("cpp_scanf_printf", "unusual but correct", "double_cpp", AC,
       "#include <cstdio>\nint main(){int x; if (scanf(\"%d\", &x) != 1) return 1; printf(\"%d\", 2 * x);}"),
]

HOSTILE_PROGRAMS: list[HostileProgram] = [
    *_EXITS, *_EQUALITY, *_TAMPERING, *_READING, *_OUTPUT, *_PROCESSES, *_RESOURCES, *_CPP,
    *_CORRECT,
]


def _fenced(code: str, problem: dict[str, Any]) -> str:
    language = problem.get("language", "python")
    return f"Here is my solution.\n```{language}\n{code}```\n"


def judge_hostile_suite(
    judge: Judge, *, port: int, programs: list[HostileProgram] | None = None,
    time_limit_s: float = 1.0,
) -> dict[str, tuple[VerdictStatus, Verdict]]:
    """Judges every hostile program in one batch: name -> (required verdict, verdict)."""
    programs = HOSTILE_PROGRAMS if programs is None else programs
    problems = make_problems(time_limit_s=time_limit_s)
    verdicts = judge.judge(
        [problems[p.problem] for p in programs],
        [_fenced(p.code.replace("{port}", str(port)), problems[p.problem]) for p in programs],
    )
    return {p.name: (p.verdict, v) for p, v in zip(programs, verdicts, strict=True)}


def judge_canaries(judge: Judge) -> list[Verdict]:
    """Judges ordinary correct programs; every verdict must be AC (later runs unharmed)."""
    problems = make_problems()
    return judge.judge(
        [problems[name] for name, _ in CANARIES],
        [_fenced(code, problems[name]) for name, code in CANARIES],
    )


def mismatches(results: dict[str, tuple[VerdictStatus, Verdict]]) -> list[str]:
    """Readable lines for every program whose verdict is not the required one."""
    return [
        f"{name}: required {required}, got {verdict.status} ({verdict.message})"
        for name, (required, verdict) in results.items()
        if verdict.status != required
    ]
