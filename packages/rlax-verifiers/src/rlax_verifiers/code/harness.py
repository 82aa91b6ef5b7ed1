"""The programs that run function-call and assert tests inside the sandbox.

Both harnesses fork before any code under test runs. The parent marks itself
non-dumpable (so the child, with the same uid, can neither open ``/proc/<parent>/fd``,
read its memory nor ptrace it), keeps the result channel (fd 3) and never runs the code
under test; the child closes fd 3 and runs it. So:

* function-call: the child sends ``fn(*args)`` as JSON of plain types (exact ``int``,
  ``float``, ``str``, ``bool``, ``None``, lists, tuples, dicts with string keys), the
  parent re-parses it with its own, untouched ``json`` and writes it to the channel.
  An object whose ``__eq__`` is always true cannot cross; an ``atexit`` that calls
  ``os._exit(0)`` ends the child, not the report; comparison happens in the judge.
* assert: the parent reads a per-run random nonce from stdin only after the fork, so
  the code under test never has it; the child runs the program and then the asserts and
  tells the parent they finished; only then does the parent write the nonce to the
  channel. An early ``sys.exit(0)``/``os._exit(0)`` or a patched ``AssertionError``
  that stops the asserts never produces the nonce. (A child that deliberately writes the
  "finished" message on its inherited pipe could still fake it: no in-process check can
  prove that code ran.)
"""

from __future__ import annotations

import ast
import json

_COMMON = r"""
import ctypes, json, os, sys
_SOURCE = {source!r}
_LIMIT = 1 << 20


def _send(fd, message):
    data = json.dumps(message).encode()
    os.write(fd, len(data).to_bytes(8, "big"))
    while data:
        data = data[os.write(fd, data):]


def _receive(fd):
    header = _read_exactly(fd, 8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "big")
    if size > _LIMIT:
        return {{"ok": False, "error": "the result is larger than 1 MiB"}}
    try:
        return json.loads(_read_exactly(fd, size))
    except ValueError:
        return {{"ok": False, "error": "the result is not valid JSON"}}


def _read_exactly(fd, size):
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _describe(exc):
    return (type(exc).__name__ + ": " + str(exc))[:2000]


def _run_program(namespace):
    exec(compile(_SOURCE, "main.py", "exec"), namespace)


def _finish(pid, message):
    if message is not None:
        os.write(3, json.dumps(message).encode())
    _pid, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if message is None else 0)


def _fork_child():
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.close(3)
        return 0, write_end
    os.close(write_end)
    return pid, read_end
"""

_FUNCTION_CALL = r"""
_FN = {fn_name!r}


def _plain(value, depth=0):
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if depth > 100:
        raise TypeError("is nested too deeply")
    if kind in (list, tuple):
        return [_plain(v, depth + 1) for v in value]
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("is a dict with non-string keys")
        return {{k: _plain(v, depth + 1) for k, v in dict.items(value)}}
    raise TypeError("is a " + kind.__name__ + ", not a plain JSON value")


def _call(args):
    namespace = {{"__name__": "solution"}}
    try:
        _run_program(namespace)
        function = namespace.get(_FN)
        if function is None and isinstance(namespace.get("Solution"), type):
            function = getattr(namespace["Solution"](), _FN, None)
        if not callable(function):
            return {{"ok": False, "error": "the program defines no function " + repr(_FN)}}
        result = function(*args)
    except BaseException as exc:
        return {{"ok": False, "error": _describe(exc)}}
    try:
        return {{"ok": True, "result": _plain(result)}}
    except (TypeError, RecursionError) as exc:
        return {{"ok": False, "wrong_type": True, "error": "the return value " + str(exc)}}


def _child_main(fd, args, send=_send, call=_call):
    send(fd, call(args))
    sys.exit(0)


_args = json.loads(sys.stdin.buffer.read())
_pid, _fd = _fork_child()
if _pid == 0:
    _child_main(_fd, _args)
_finish(_pid, _receive(_fd))
"""

_ASSERT = r"""
_TESTS = {tests!r}


def _plain_equal_factory():
    plain = (type(None), bool, int, float, str)

    def is_plain(value, depth=0):
        kind = type(value)
        if kind in plain:
            return True
        if depth > 100:
            return False
        if kind in (list, tuple):
            return all(is_plain(v, depth + 1) for v in value)
        if kind is dict:
            return all(type(k) is str and is_plain(v, depth + 1) for k, v in dict.items(value))
        return False

    def equal(a, b):
        a_plain, b_plain = is_plain(a), is_plain(b)
        if a_plain != b_plain:
            return False  # a program's object posing as a value: never equal to a value
        return a == b

    return equal


def _child_main(
    fd, send=_send, describe=_describe, run=_run_program, equal=_plain_equal_factory(),
    assertion_error=AssertionError,
):
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    namespace = {{"__name__": "__main__"}}
    try:
        run(namespace)
    except BaseException as exc:
        send(fd, {{"ok": False, "error": "the program failed: " + describe(exc)}})
        sys.exit(1)
    namespace["_rlax_equal"] = equal
    try:
        exec(compile(_TESTS, "tests.py", "exec"), namespace)
    except assertion_error as exc:
        send(fd, {{"ok": False, "assertion": True, "error": describe(exc)}})
        sys.exit(1)
    except BaseException as exc:
        send(fd, {{"ok": False, "error": "the tests failed: " + describe(exc)}})
        sys.exit(1)
    send(fd, {{"ok": True}})
    sys.exit(0)


_pid, _fd = _fork_child()
if _pid == 0:
    _child_main(_fd)
_nonce = sys.stdin.buffer.read().decode().strip()
_message = _receive(_fd)
if _message is not None and _message.get("ok") is True:
    _message = {{"ok": True, "nonce": _nonce}}
_finish(_pid, _message)
"""


def function_call_program(source: str, fn_name: str) -> str:
    """The harness that calls ``fn_name(*args)`` (args: JSON on stdin)."""
    return _COMMON.format(source=source) + _FUNCTION_CALL.format(fn_name=fn_name)


def assert_program(source: str, tests: str) -> str:
    """The harness that runs ``source`` then the asserts ``tests`` (nonce on stdin).

    Raises:
        SyntaxError: ``tests`` is not valid Python.
    """
    return _COMMON.format(source=source) + _ASSERT.format(tests=harden_asserts(tests))


class _EqualityInAsserts(ast.NodeTransformer):
    """``assert a == b`` → ``assert _rlax_equal(a, b)`` (and ``!=`` → ``not ...``)."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        """Rewrites one assert statement if it is a single ``==`` or ``!=``."""
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
        ):
            call: ast.expr = ast.Call(
                func=ast.Name("_rlax_equal", ast.Load()),
                args=[test.left, test.comparators[0]],
                keywords=[],
            )
            if isinstance(test.ops[0], ast.NotEq):
                call = ast.UnaryOp(ast.Not(), call)
            node.test = ast.copy_location(call, test)
        return node


def harden_asserts(tests: str) -> str:
    """Rewrites equality asserts so an object posing as a value never equals one.

    In ``assert f(1) == 2`` the program's return value is compared with ``2`` by a
    function the harness captured before the program ran: if exactly one side is a plain
    value (exact built-in types all the way down), they are unequal, so an object whose
    ``__eq__`` always returns True fails the assert.
    """
    tree = _EqualityInAsserts().visit(ast.parse(tests))
    return ast.unparse(ast.fix_missing_locations(tree))


def call_input(args: list) -> str:
    """The stdin of one function-call run."""
    return json.dumps(args)
