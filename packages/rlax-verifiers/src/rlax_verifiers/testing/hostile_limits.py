# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""Hostile programs, part 2: processes, time, memory, disk, network, credentials, the
file system, C++ compile bombs; and unusual programs that are correct."""

from __future__ import annotations

from rlax_verifiers.testing.hostile_problems import AC, CE, MLE, RE, TLE, WA
from rlax_verifiers.testing.hostile_problems import program as _p

_PROCESSES = [
    _p("fork_bomb", "fork bomb", "double", RE, "import os\nwhile True:\n    os.fork()"),
    _p(
        "fork_bomb_ignoring_errors",
        "fork bomb",
        "double",
        TLE,
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ),
    _p(
        "thread_bomb",
        "fork bomb",
        "double",
        RE,
        r"""
import threading, time
while True:
    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
""",
    ),
    _p(
        "setsid_double_fork_daemon",
        "daemon",
        "double",
        AC,
        r"""
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
""",
    ),
    _p(
        "ignored_signals_busy_loop",
        "signals",
        "double",
        TLE,
        r"""
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):
    signal.signal(s, signal.SIG_IGN)
while True:
    pass
""",
    ),
    _p("sleep", "time", "double", TLE, "import time\ntime.sleep(100)\nprint(42)"),
    _p("gil_holding_bigint", "time", "double", TLE, "x = 10 ** (10 ** 8)\nprint(42)"),
]

_RESOURCES = [
    _p(
        "huge_allocation",
        "memory bomb",
        "double_slow",
        MLE,
        "x = bytearray(8 * 1024**3)\nprint(42)",
    ),
    _p(
        "growing_list",
        "memory bomb",
        "double_slow",
        MLE,
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))",
    ),
    _p(
        "one_huge_file",
        "disk filling",
        "zero_slow",
        RE,
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))",
    ),
    _p(
        "many_files",
        "disk filling",
        "zero_slow",
        RE,
        "i = 0\nwhile True:\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * (8 << 20))\n    i += 1",
    ),
    _p(
        "internet_access",
        "network",
        "double",
        RE,
        "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint(42)",
    ),
    _p(
        "host_loopback_access",
        "network",
        "double",
        RE,
        "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint(42)",
    ),
    _p(
        "dns_lookup",
        "network",
        "double",
        RE,
        "import socket\nsocket.getaddrinfo('example.com', 80)\nprint(42)",
    ),
    _p(
        "credentials_and_environment",
        "credentials",
        "secret",
        WA,
        r"""
import os
print(dict(os.environ))
for path in ("/root/.aws/credentials", "/etc/shadow", "/root/.ssh/id_rsa", "/proc/1/environ",
             "/run/secrets", "/var/run/secrets/kubernetes.io/serviceaccount/token"):
    try:
        print(path, open(path, "rb").read(200))
    except OSError as exc:
        print(path, type(exc).__name__)
""",
    ),
    _p(
        "writes_outside_work_dir",
        "filesystem",
        "zero",
        AC,
        r"""
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
""",
    ),
]

_CPP = [
    _p(
        "cpp_include_dev_urandom",
        "compile bomb",
        "double_cpp",
        CE,
        '#include "/dev/urandom"\nint main(){}',
    ),
    _p(
        "cpp_template_explosion",
        "compile bomb",
        "double_cpp",
        CE,
        r"""
template<int N, int M> struct F { enum { v = F<N-1, M>::v + F<N-1, M+1>::v }; };
template<int M> struct F<0, M> { enum { v = 1 }; };
int main() { return F<40, 0>::v; }
""",
    ),
    _p(
        "cpp_infinite_loop",
        "time",
        "double_cpp",
        TLE,
        "int main(){ volatile int x = 0; while (true) x++; }",
    ),
    _p(
        "cpp_segfault",
        "crash",
        "double_cpp",
        RE,
        "int main(){ volatile int *p = nullptr; return *p; }",
    ),
    _p(
        "cpp_huge_allocation",
        "memory bomb",
        "double_cpp",
        MLE,
        '#include <vector>\n#include <cstdio>\nint main(){ std::vector<char> v(8ULL << 30, 1); printf("%d\\n", v[7]); }',
    ),
]

_CORRECT = [
    _p(
        "stdin_buffer",
        "unusual but correct",
        "double",
        AC,
        "import sys\nprint(int(sys.stdin.buffer.read()) * 2)",
    ),
    _p("open_fd_zero", "unusual but correct", "double", AC, "print(int(open(0).read()) * 2)"),
    _p(
        "deep_recursion",
        "unusual but correct",
        "double",
        AC,
        r"""
import sys
sys.setrecursionlimit(10**6)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
print(depth(100000) // 100000 * 2 * int(input()))
""",
    ),
    _p(
        "no_trailing_newline",
        "unusual but correct",
        "double",
        AC,
        "print(int(input()) * 2, end='')",
    ),
    _p("extra_spaces", "unusual but correct", "double", AC, "print('  ', int(input()) * 2, '   ')"),
    _p(
        "worker_thread",
        "unusual but correct",
        "double",
        AC,
        r"""
import threading
out = []
t = threading.Thread(target=lambda: out.append(int(input()) * 2))
t.start(); t.join()
print(out[0])
""",
    ),
    _p(
        "main_guard",
        "unusual but correct",
        "double",
        AC,
        "def main():\n    print(int(input()) * 2)\n\nif __name__ == '__main__':\n    main()",
    ),
    _p(
        "subprocess_child",
        "unusual but correct",
        "double",
        AC,
        r"""
import subprocess, sys
n = int(input())
print(subprocess.run([sys.executable, "-c", f"print({n} * 2)"], capture_output=True, text=True).stdout.strip())
""",
    ),
    _p(
        "leetcode_solution_class",
        "unusual but correct",
        "add_call",
        AC,
        "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b",
    ),
    _p(
        "assert_with_helpers",
        "unusual but correct",
        "add_assert",
        AC,
        "from functools import reduce\ndef add(a, b):\n    return reduce(lambda x, y: x + y, [a, b])",
    ),
    _p(
        "cpp_scanf_printf",
        "unusual but correct",
        "double_cpp",
        AC,
        '#include <cstdio>\nint main(){int x; if (scanf("%d", &x) != 1) return 1; printf("%d", 2 * x);}',
    ),
]

LIMITS = [*_PROCESSES, *_RESOURCES, *_CPP, *_CORRECT]
