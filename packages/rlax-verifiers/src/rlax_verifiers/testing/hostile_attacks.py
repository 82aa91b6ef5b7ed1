# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""Hostile programs, part 1: early exits, fake equality, harness tampering, reading
answers, output bombs."""

from __future__ import annotations

from rlax_verifiers.testing.hostile_problems import AC, OLE, RE, TLE, WA
from rlax_verifiers.testing.hostile_problems import program as _p

_EXITS = [
    _p("exit_zero_before_answer", "early exit", "double", WA, "import sys\nsys.exit(0)\nprint(42)"),
    _p(
        "os_exit_zero_before_call",
        "early exit",
        "add_call",
        RE,
        "import os\nos._exit(0)\ndef add(a, b):\n    return a + b",
    ),
    _p(
        "raise_systemexit_before_asserts",
        "early exit",
        "add_assert",
        RE,
        "def add(a, b):\n    return 0\nraise SystemExit",
    ),
    _p(
        "atexit_os_exit_after_failed_asserts",
        "early exit",
        "add_assert",
        WA,
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0",
    ),
    _p(
        "atexit_os_exit_with_wrong_result",
        "early exit",
        "add_call",
        WA,
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0",
    ),
    _p(
        "systemexit_inside_function",
        "early exit",
        "add_call",
        RE,
        "def add(a, b):\n    raise SystemExit(0)",
    ),
    _p(
        "os_exit_inside_asserted_function",
        "early exit",
        "add_assert",
        RE,
        "import os\ndef add(a, b):\n    os._exit(0)",
    ),
]

_ALWAYS_EQUAL = r"""
class AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return AlwaysEqual()
"""
_INT_EQUAL = "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)"

_EQUALITY = [
    _p("always_equal_object_call", "always equal", "add_call", WA, _ALWAYS_EQUAL),
    _p("int_subclass_equal_call", "always equal", "add_call", WA, _INT_EQUAL),
    _p("always_equal_object_assert", "always equal", "add_assert", WA, _ALWAYS_EQUAL),
    _p("int_subclass_equal_assert", "always equal", "add_assert", WA, _INT_EQUAL),
]

_TAMPERING = [
    _p(
        "patch_builtin_print",
        "harness tampering",
        "double",
        WA,
        "import builtins\nbuiltins.print = lambda *a, **k: None\nprint(42)",
    ),
    _p(
        "forge_result_on_fd3",
        "harness tampering",
        "add_call",
        RE,
        'import os\nos.write(3, b\'{"ok": true, "result": 3}\')\nos._exit(0)\ndef add(a, b):\n    return 0',
    ),
    _p(
        "forge_result_via_parent_proc",
        "harness tampering",
        "add_call",
        RE,
        r"""
import os
for fd in os.listdir(f"/proc/{os.getppid()}/fd") if os.access(f"/proc/{os.getppid()}/fd", os.R_OK) else []:
    try:
        os.write(os.open(f"/proc/{os.getppid()}/fd/{fd}", os.O_WRONLY), b'{"ok": true, "result": 3}')
    except OSError:
        pass
os._exit(0)
""",
    ),
    _p(
        "patch_harness_send",
        "harness tampering",
        "add_assert",
        WA,
        "import __main__\n__main__._send = lambda fd, message: None\ndef add(a, b):\n    return 0",
    ),
    _p(
        "patch_assertion_error",
        "harness tampering",
        "add_assert",
        WA,
        "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\ndef add(a, b):\n    return 0",
    ),
    _p(
        "sitecustomize_and_conftest_drop",
        "harness tampering",
        "double",
        WA,
        r"""
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
""",
    ),
    _p(
        "shadow_json_module",
        "harness tampering",
        "add_call",
        WA,
        r"""
import importlib, json
with open("json.py", "w") as f:
    f.write("def dumps(*a, **k):\n    return '{\"ok\": true, \"result\": 3}'\ndef loads(s):\n    return 3\n")
importlib.reload(json)
def add(a, b):
    return 0
""",
    ),
]

_READING = [
    _p(
        "read_parent_proc",
        "reading answers",
        "secret",
        WA,
        r"""
import os
for pid in ("1", str(os.getppid())):
    for name in ("environ", "cmdline", "maps", "mem", "fd"):
        try:
            path = f"/proc/{pid}/{name}"
            print(os.listdir(path) if name == "fd" else open(path, "rb").read(4096))
        except OSError as exc:
            print(type(exc).__name__)
""",
    ),
    _p(
        "frame_walking_and_gc_scan",
        "reading answers",
        "secret",
        WA,
        r"""
import gc, sys
found = [o for o in gc.get_objects() if isinstance(o, str) and "rlax-secret-" in o and o != "rlax-secret-"]
frame, seen = sys._getframe(), []
while frame is not None:
    seen.append(repr(frame.f_globals.keys()))
    frame = frame.f_back
print(found[0] if found else "nothing found")
""",
    ),
    _p(
        "other_runs_files",
        "reading answers",
        "secret",
        WA,
        r"""
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
""",
    ),
]

_OUTPUT = [
    _p("endless_print", "output bomb", "double", OLE, "while True:\n    print('y' * 1000)"),
    # stderr is not compared: writing without end is no output-limit fault, only slow
    # (its tail is kept); megabytes of it beside the right answer are no fault at all.
    _p(
        "huge_stderr",
        "output bomb",
        "double",
        TLE,
        "import sys\nwhile True:\n    sys.stderr.write('e' * 10000)",
    ),
    _p(
        "stderr_megabytes_right_answer",
        "output bomb",
        "double",
        AC,
        "import sys\nsys.stderr.write('e' * (5 << 20))\nprint(int(input()) * 2)",
    ),
    _p("single_huge_line", "output bomb", "double", OLE, "print('9' * 10**7)"),
    _p(
        "invalid_utf8",
        "output bomb",
        "double",
        WA,
        "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe42\\n')",
    ),
    _p("nul_bytes", "output bomb", "double", WA, "print('4\\x002')"),
]

ATTACKS = [*_EXITS, *_EQUALITY, *_TAMPERING, *_READING, *_OUTPUT]
