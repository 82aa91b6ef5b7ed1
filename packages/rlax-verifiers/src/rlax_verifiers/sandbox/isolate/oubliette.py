"""The "oubliette": the AWS Lambda function that runs a batch of programs, then forgets.

``handler(event, context)`` runs the batch exactly as a sandbox container does (warm
zygotes, a uid per slot when the function runs as root, rlimits, process groups killed
at the wall limit), then kills every process the invocation started and, in Lambda (or
wherever it was given a private ``/tmp``), wipes ``/tmp``: Lambda reuses execution
environments, and the next invocation must find nothing of this one. Responses are
kept under Lambda's 6 MB limit by truncating the largest outputs (their runs then
read as output-limit-exceeded). Deployed as ``isolate.oubliette.handler`` with this
package at the function's root (see the Dockerfile in ``rlax_verifiers/sandbox/aws_lambda``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .container import run_batch_here

RESPONSE_LIMIT_BYTES = 6 * 1024 * 1024 - 64 * 1024  # Lambda's sync limit, less headroom
_PR_SET_CHILD_SUBREAPER = 36


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Runs ``event`` (``{"requests": [...], "settings": {...}, "workers": N}``)."""
    _become_subreaper()
    tmp = Path(os.environ.get("OUBLIETTE_TMP", "/tmp"))
    work_root = tmp / f"oubliette-{os.getpid()}-{time.monotonic_ns()}"
    work_root.mkdir(parents=True, exist_ok=True)
    message = {**event, "python": os.environ.get("OUBLIETTE_PYTHON") or sys.executable}
    try:
        reply = run_batch_here(message, work_root)
    finally:
        _kill_descendants()
        shutil.rmtree(work_root, ignore_errors=True)
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or os.environ.get("OUBLIETTE_WIPE_TMP"):
            _wipe(tmp)
    return _fit(reply, RESPONSE_LIMIT_BYTES)


def _fit(reply: dict[str, Any], limit: int) -> dict[str, Any]:
    """Truncates the largest captured streams until the reply's JSON fits ``limit``.

    stderr goes first, to its tail (it is never compared, and its end holds the error);
    stdout and the channel, which a judge compares, are cut only if that is not enough.
    """
    size = len(json.dumps(reply))
    if size <= limit:
        return reply
    results = [r for row in reply["results"] for r in row]
    for streams in (("stderr",), ("stderr", "stdout", "channel")):
        captured = _captured(results)
        budget = max(1024, (limit - (size - captured)) // max(1, len(streams) * len(results)))
        for result in results:
            for stream in streams:
                text = result.get(stream)
                if isinstance(text, str) and len(text) > budget:
                    result[stream] = text[-budget:] if stream == "stderr" else text[:budget]
                    result[f"{stream}_truncated"] = True
        size = len(json.dumps(reply))
        if size <= limit:
            break
    return reply


def _captured(results: list[dict[str, Any]]) -> int:
    return sum(
        len(json.dumps(r.get(s) or "")) for r in results for s in ("stdout", "stderr", "channel")
    )


def _become_subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (ImportError, OSError):  # pragma: no cover - depends on the runtime
        pass


def _kill_descendants() -> None:
    """Kills (and reaps) every process below this one, orphans included (subreaper)."""
    me = os.getpid()
    for _round in range(100):
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as stat:
                        parents[int(entry)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        found = [p for p in parents if _descends(p, me, parents)]
        if not found:
            return
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)


def _descends(pid: int, root: int, parents: dict[int, int]) -> bool:
    for _hop in range(4096):
        pid = parents.get(pid, 0)
        if pid == root:
            return True
        if pid <= 1:
            return False
    return False


def _wipe(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def invoke_main() -> None:
    """One invocation as a process: the event on stdin, the response (or the error, the
    way the Lambda runtime reports an unhandled one) on stdout; exit 1 on error."""
    try:
        event = json.loads(sys.stdin.buffer.read())
        response = handler(event)
    except Exception as exc:  # reported to the caller as the function's error
        error = {
            "errorMessage": str(exc),
            "errorType": type(exc).__name__,
            "stackTrace": traceback.format_exception(exc)[-10:],
        }
        sys.stdout.write(json.dumps(error))
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.write(json.dumps(response))
    sys.stdout.flush()
    os._exit(0)
