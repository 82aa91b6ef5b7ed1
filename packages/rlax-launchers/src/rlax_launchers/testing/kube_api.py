"""A small HTTP server that speaks enough of the Kubernetes API for the ``kubernetes`` client.

It stores objects by their REST path and answers like an API server: ``POST`` to a
collection creates (409 ``AlreadyExists`` when the name is taken), ``GET`` reads or lists
(with an equality ``labelSelector``), ``PUT`` replaces (409 ``Conflict`` unless the
body's ``resourceVersion`` is the stored one), ``DELETE`` removes (404 when absent). Every
request is recorded. It validates nothing else: schema checks are the manifest tests'.
CustomResourceDefinitions are objects like any other (:meth:`FakeKubernetesApi.install_crd`,
:func:`jobset_crd`): the launcher reads them, the server does not serve their kinds from
them.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# The failure-policy actions of JobSet before v0.12.0, and those v0.12.0 added.
JOBSET_ACTIONS_BEFORE_V0_12 = ["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"]
JOBSET_ACTIONS = [*JOBSET_ACTIONS_BEFORE_V0_12, "RestartJob", "RestartJobAndIgnoreMaxRestarts"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server answered.

    Attributes:
        method: HTTP method.
        path: the URL path.
        query: the query parameters (first value of each).
        body: the parsed JSON body, if any.
    """

    method: str
    path: str
    query: dict[str, str]
    body: Any


class FakeKubernetesApi:
    """The server; use as a context manager, or :meth:`start` and :meth:`stop`.

    Attributes:
        objects: REST path of an object → the object.
        requests: every request, in order.
        refuse: HTTP status to answer every request with (e.g. 403), or None.
        missing_apis: path prefixes the server has no API for (a CRD that is not
            installed, e.g. ``/apis/keda.sh/``): 404 to every request under them.
        forbidden_apis: path prefixes the caller may not use (RBAC): 403 under them.
    """

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[RecordedRequest] = []
        self.refuse: int | None = None
        self.missing_apis: list[str] = []
        self.forbidden_apis: list[str] = []
        self._lock = threading.Lock()
        self._version = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKubernetesApi:
        """Serves in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving (if it was) and closes the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeKubernetesApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig whose current context is this server (no credentials)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        """Stores an object as if the cluster had made it (a pod, say)."""
        with self._lock:
            self._store(path, obj)

    def install_crd(self, crd: dict[str, Any]) -> None:
        """Stores a CustomResourceDefinition where the API server serves it."""
        self.put_object(f"{CRD_PATH}/{crd['metadata']['name']}", crd)

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        obj = json.loads(json.dumps(obj))
        metadata = obj.setdefault("metadata", {})
        metadata["resourceVersion"] = str(self._version)
        metadata.setdefault("uid", f"uid-{self._version}")
        if obj.get("kind") == "Service":
            obj.setdefault("spec", {}).setdefault("clusterIP", "10.96.0.42")
        self.objects[path] = obj
        return obj

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if self.refuse is not None:
            return self.refuse, _status(self.refuse, "Forbidden", "refused by the test")
        if any(path.startswith(prefix) for prefix in self.forbidden_apis):
            return 403, _status(403, "Forbidden", "forbidden by the test")
        if any(path.startswith(prefix) for prefix in self.missing_apis):
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        with self._lock:
            if method == "POST":
                name = body.get("metadata", {}).get("name", "")
                target = f"{path}/{name}"
                if target in self.objects:
                    return 409, _status(409, "AlreadyExists", f"{name} already exists")
                return 201, self._store(target, body)
            if method == "GET" and path in self.objects:
                return 200, self.objects[path]
            if method == "GET" and _is_collection(path):
                return 200, self._list(path, query.get("labelSelector", ""))
            if path not in self.objects:
                return 404, _status(404, "NotFound", f"{path} not found")
            if method == "PUT":
                stored = self.objects[path]["metadata"]["resourceVersion"]
                if body.get("metadata", {}).get("resourceVersion") != stored:
                    return 409, _status(409, "Conflict", "the object has been modified")
                return 200, self._store(path, body)
            if method == "DELETE":
                deleted = self.objects.pop(path)
                # Like the API server: a deleted Service comes back, other kinds a Status.
                if deleted.get("kind") == "Service":
                    return 200, deleted
                return 200, _status(200, "", "deleted", status="Success")
        return 405, _status(405, "MethodNotAllowed", method)

    def _list(self, path: str, selector: str) -> dict[str, Any]:
        wanted = dict(p.split("=", 1) for p in selector.split(",") if "=" in p)
        items = [
            obj
            for key, obj in self.objects.items()
            if key.rsplit("/", 1)[0] == path
            and all(obj["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
        ]
        return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                api.requests.append(RecordedRequest(self.command, url.path, query, body))
                status, answer = api._answer(self.command, url.path, query, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve  # noqa: N815 (http.server names)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler


def jobset_crd(
    actions: list[str], *, labels: dict[str, str] | None = None, version: str = "v1alpha2"
) -> dict[str, Any]:
    """A JobSet CustomResourceDefinition cut down to what the launcher reads: the served
    version's failure-policy rule ``action`` enum (a real one holds the whole schema)."""
    rules = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"action": {"type": "string", "enum": list(actions)}},
        },
    }
    failure_policy = {"type": "object", "properties": {"rules": rules}}
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"failurePolicy": failure_policy}}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobsets.jobset.x-k8s.io", "labels": dict(labels or {})},
        "spec": {
            "group": "jobset.x-k8s.io",
            "names": {"kind": "JobSet", "plural": "jobsets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _is_collection(path: str) -> bool:
    # .../namespaces/NS/PLURAL, or a cluster-wide /api/v1/PLURAL or /apis/GROUP/V/PLURAL.
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[-3] == "namespaces":
        return True
    return (parts[0], len(parts)) in (("api", 3), ("apis", 4))


def _status(code: int, reason: str, message: str, status: str = "Failure") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": status,
        "reason": reason,
        "message": message,
        "code": code,
    }
