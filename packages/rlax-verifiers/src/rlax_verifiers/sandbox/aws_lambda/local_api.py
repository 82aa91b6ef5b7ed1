"""The Lambda Invoke HTTP API on this machine, running the oubliette for real.

``POST /2015-03-31/functions/{name}/invocations`` runs the handler in a fresh process
per invocation (as Lambda runs it in an execution environment) and answers as Lambda
does: 200 with the response; 200 with ``X-Amz-Function-Error: Unhandled`` and the error
document when the handler failed or timed out; 413 ``RequestEntityTooLargeException``
for a request over 6 MB; 429 ``TooManyRequestsException`` past the concurrency limit;
404 for an unknown function. Run as root, each invocation also gets what Lambda's
microVM gives it: no network (a new network namespace), its own pid namespace and its
own tmpfs ``/tmp`` (which the handler wipes), and, like a Lambda image, a read-only
view of the system directories only (bubblewrap).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlax_verifiers.sandbox.isolate import batch
from rlax_verifiers.sandbox.isolate.launch import ISOLATE_PARENT, bwrap_namespaces

PAYLOAD_LIMIT_BYTES = 6 * 1024 * 1024
_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
_ISOLATE_DIR = Path(batch.__file__).resolve().parent
# The handler's driver writes into its slots' directories and switches to their uids.
_HANDLER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE",
                 "CAP_FOWNER")  # fmt: skip


def _entry(isolate_parent: str) -> str:
    return (
        f"import sys; sys.path.insert(0, {isolate_parent!r}); "
        "from isolate.oubliette import invoke_main; invoke_main()"
    )


@dataclass
class FunctionSettings:
    """What the local function is like.

    Attributes:
        name: the function name clients invoke.
        timeout_s: the function's timeout.
        concurrency: invocations at once; more get 429.
        python: the interpreter the handler (and the programs) run on.
        tmp_mb: size of each invocation's private /tmp (when run as root).
        delay_s: seconds each invocation waits, holding its concurrency slot, before the
            handler runs: the latency of a remote function (network, queueing, a cold
            start) that this machine does not have. For tests and benchmarks; not part
            of the ``lambda`` sandbox's config.
    """

    name: str = "oubliette"
    timeout_s: float = 120.0
    concurrency: int = 4
    python: str = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    tmp_mb: int = 512
    delay_s: float = 0.0


class LocalLambdaServer:
    """A threaded HTTP server for the Invoke API on 127.0.0.1 (port 0: pick a free one)."""

    def __init__(self, settings: FunctionSettings | None = None, port: int = 0) -> None:
        self.settings = settings or FunctionSettings()
        self._running = 0
        self._lock = threading.Lock()
        self.invocations = 0
        self.throttled = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """The URL to give boto3 as ``endpoint_url``."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LocalLambdaServer:
        """Serves in a background thread."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving (invocations in flight finish)."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def invoke(self, payload: bytes) -> tuple[int, dict[str, str], bytes]:
        """Runs one invocation: (status, headers, body)."""
        if len(payload) > PAYLOAD_LIMIT_BYTES:
            return _error(413, "RequestEntityTooLargeException",
                          f"Request must be smaller than {PAYLOAD_LIMIT_BYTES} bytes for the "
                          "InvokeFunction operation")  # fmt: skip
        with self._lock:
            if self._running >= self.settings.concurrency:
                self.throttled += 1
                reason = "ReservedFunctionConcurrentInvocationLimitExceeded"
                return _error(429, "TooManyRequestsException", "Rate Exceeded.", Reason=reason)
            self._running += 1
            self.invocations += 1
        try:
            return self._run(payload)
        finally:
            with self._lock:
                self._running -= 1

    def _run(self, payload: bytes) -> tuple[int, dict[str, str], bytes]:
        s = self.settings
        if s.delay_s > 0:
            time.sleep(s.delay_s)
        env = {"OUBLIETTE_PYTHON": s.python, "PATH": "/usr/bin:/bin"}
        command = [s.python, "-I", "-c", _entry(str(_ISOLATE_DIR.parent))]
        if os.geteuid() == 0 and shutil.which("bwrap"):
            env["OUBLIETTE_WIPE_TMP"] = "1"
            command = [
                *bwrap_namespaces(shutil.which("bwrap") or "bwrap", s.python, _HANDLER_CAPS),
                "--die-with-parent", "--perms", "1777", "--size", str(s.tmp_mb << 20),
                "--tmpfs", "/tmp",
                "--ro-bind", str(_ISOLATE_DIR), f"{ISOLATE_PARENT}/isolate",
                *(arg for key, value in env.items() for arg in ("--setenv", key, value)),
                s.python, "-I", "-c", _entry(ISOLATE_PARENT),
            ]  # fmt: skip
        try:
            done = subprocess.run(
                command, input=payload, capture_output=True, env=env, timeout=s.timeout_s,
                start_new_session=True, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            body = {"errorMessage": f"Task timed out after {s.timeout_s:.2f} seconds"}
            return 200, {"X-Amz-Function-Error": "Unhandled"}, json.dumps(body).encode()
        if done.returncode != 0:
            body = (
                done.stdout
                or json.dumps(
                    {
                        "errorMessage": f"Runtime exited with status {done.returncode}: "
                        f"{done.stderr.decode(errors='replace')[-500:]}",
                        "errorType": "Runtime.ExitError",
                    }
                ).encode()
            )
            return 200, {"X-Amz-Function-Error": "Unhandled"}, body
        if len(done.stdout) > PAYLOAD_LIMIT_BYTES:
            body = {"errorMessage": "Response payload size exceeded maximum allowed payload size",
                    "errorType": "Function.ResponseSizeTooLarge"}  # fmt: skip
            return 200, {"X-Amz-Function-Error": "Unhandled"}, json.dumps(body).encode()
        return 200, {}, done.stdout

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            """Routes Invoke calls to the server; anything else is a 404."""

            def do_POST(self) -> None:
                """Answers one Invoke call."""
                match = _PATH.match(self.path.split("?")[0])
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else b""
                if match is None or match["name"] != server.settings.name:
                    name = match["name"] if match else self.path
                    status, headers, body = _error(
                        404, "ResourceNotFoundException", f"Function not found: {name}"
                    )
                else:
                    status, headers, body = server.invoke(payload)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Amz-Executed-Version", "$LATEST")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests and benchmarks make many calls."""

        return Handler


def _error(status: int, kind: str, message: str, **extra: str) -> tuple[int, dict[str, str], bytes]:
    body = {"Type": "User", "message": message, **extra}
    return status, {"x-amzn-ErrorType": kind}, json.dumps(body).encode()


def main() -> None:
    """``python -m rlax_verifiers.sandbox.aws_lambda.local_api [PORT]``: serve until ^C."""
    server = LocalLambdaServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 9001)
    print(f"Lambda Invoke API for {server.settings.name!r} on {server.endpoint_url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        server.httpd.server_close()


if __name__ == "__main__":
    main()
