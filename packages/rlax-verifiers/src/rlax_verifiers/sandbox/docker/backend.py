"""The ``docker`` sandbox: each batch of runs in one fresh, locked-down container.

The container has no network, a read-only root, a tmpfs work area, memory, pids and
CPU limits, all capabilities dropped but the few its driver needs to switch to the
slot uids and kill what runs leave, and ``no-new-privileges``. Inside, the same isolate
package as the local backend runs the batch (a warm zygote per slot, a uid per slot,
rlimits, a process group killed at the wall limit); the container is removed after the
batch. The batch goes in on stdin and the results come back on stdout, so the engine
may be remote. Big batches are split over several containers, ``containers`` at a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import struct
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import RunRequest, SandboxBackend
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import ExecutionResult
from rlax_verifiers.sandbox import SandboxUnavailableError
from rlax_verifiers.sandbox.docker.image import ensure_image
from rlax_verifiers.sandbox.records import request_to_dict, results_from_dicts, sandbox_errors

_ENTRY = "import sys; sys.path.insert(0, '/opt/rlax'); from isolate.container import main; main()"
_DRIVER_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]


class DockerSandboxConfig(BaseModel):
    """Docker: one container per batch, no network, read-only root, resource limits."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(default=2, ge=1, description="Programs run at once in a container.")
    containers: int = Field(default=1, ge=1, description="Containers run at the same time.")
    runs_per_container: int = Field(
        default=512, ge=1, description="Most runs (tests) handed to one container."
    )
    image: str | None = Field(
        default=None, description="Image to use; default: build rlax-sandbox offline if missing."
    )
    memory_mb: int = Field(default=2048, ge=128, description="Memory limit of a container.")
    pids: int = Field(default=256, ge=16, description="Process limit of a container.")
    cpus: float = Field(default=2.0, gt=0, description="CPU limit of a container.")
    disk_mb: int = Field(default=256, ge=64, description="Size of the /sandbox tmpfs.")
    compile_time_limit_s: float = Field(default=15.0, gt=0, description="C++ compile limit.")
    first_uid: int | None = Field(
        default=None, ge=1000, description="Uid of the first slot (default: a random block)."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Extra time a container may take.")


class DockerSandbox(SandboxBackend):
    """Runs batches in containers of the sandbox image."""

    def __init__(self, config: DockerSandboxConfig | None = None) -> None:
        self.config = config or DockerSandboxConfig()
        self._client: Any = None
        self._images: dict[str, str] = {}

    def run_batch(self, requests: Sequence[RunRequest]) -> list[list[ExecutionResult]]:
        """Runs the batch in as many containers as ``runs_per_container`` requires."""
        if not requests:
            return []
        client = self._connect()
        groups = _split(list(requests), self.config.runs_per_container)
        with ThreadPoolExecutor(self.config.containers) as executor:
            parts = list(executor.map(lambda g: self._run_container(client, g), groups))
        return [row for part in parts for row in part]

    def close(self) -> None:
        """Closes the engine connection."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connect(self) -> Any:
        if self._client is None:
            import docker
            import docker.errors

            try:
                client = docker.from_env(timeout=300)
                client.ping()
            except (docker.errors.DockerException, OSError) as exc:
                raise SandboxUnavailableError(
                    f"the docker sandbox cannot reach a Docker engine ({exc}); start one (CI: "
                    "scripts/lib/docker.sh) or set DOCKER_HOST"
                ) from None
            self._client = client
        return self._client

    def _image(self, client: Any, flavour: str) -> str:
        if self.config.image:
            return self.config.image
        if flavour not in self._images:
            self._images[flavour] = ensure_image(client, flavour)
        return self._images[flavour]

    def _run_container(
        self, client: Any, requests: list[RunRequest]
    ) -> list[list[ExecutionResult]]:
        c = self.config
        flavour = "cpp" if any(r.program.language == "cpp" for r in requests) else "python"
        runs = sum(len(r.stdin_cases) for r in requests)
        budget = sum(r.program.time_limit_s * len(r.stdin_cases) for r in requests) / c.workers
        budget += c.compile_time_limit_s * math.ceil(
            sum(r.program.language == "cpp" for r in requests) / c.workers
        )
        message = {
            "requests": [request_to_dict(r) for r in requests],
            "settings": {"compile_time_limit_s": c.compile_time_limit_s},
            "workers": min(c.workers, max(1, runs)),
            "first_uid": c.first_uid,
            "python": "/usr/bin/python3",
        }
        container = None
        try:
            api = client.api
            host_config = api.create_host_config(
                network_mode="none", read_only=True,
                tmpfs={"/sandbox": f"size={c.disk_mb}m,mode=0711,exec",
                       "/tmp": "size=64m,mode=1777"},
                mem_limit=f"{c.memory_mb}m", memswap_limit=f"{c.memory_mb}m",
                pids_limit=c.pids, nano_cpus=int(c.cpus * 1e9), cap_drop=["ALL"],
                cap_add=_DRIVER_CAPS, security_opt=["no-new-privileges"], shm_size="64m",
            )  # fmt: skip
            created = api.create_container(
                self._image(client, flavour), ["/usr/bin/python3", "-I", "-c", _ENTRY],
                stdin_open=True, environment={}, hostname="sandbox",
                labels={"rlax": "sandbox"}, host_config=host_config, network_disabled=True,
            )  # fmt: skip
            container = client.containers.get(created["Id"])
            stdout, stderr = _exchange(client, container, json.dumps(message).encode(),
                                       budget + c.timeout_s)  # fmt: skip
            status = container.wait(timeout=30).get("StatusCode")
            if status != 0:
                raise RuntimeError(f"sandbox container exited {status}: {stderr[-600:]!r}")
            return results_from_dicts(json.loads(stdout)["results"])
        except SandboxUnavailableError:
            raise
        except Exception as exc:  # the engine or the container failed: the runs are SE
            return sandbox_errors(requests, f"docker sandbox: {type(exc).__name__}: {exc}")
        finally:
            if container is not None:
                with contextlib.suppress(Exception):
                    container.remove(force=True)


def _split(requests: list[RunRequest], most_runs: int) -> list[list[RunRequest]]:
    groups: list[list[RunRequest]] = [[]]
    count = 0
    for request in requests:
        if groups[-1] and count + len(request.stdin_cases) > most_runs:
            groups.append([])
            count = 0
        groups[-1].append(request)
        count += len(request.stdin_cases)
    return groups


def _exchange(client: Any, container: Any, payload: bytes, timeout_s: float) -> tuple[str, str]:
    """Starts the container, writes ``payload`` to its stdin, reads stdout and stderr."""
    attached = client.api.attach_socket(
        container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    )
    sock: socket.socket = getattr(attached, "_sock", attached)
    deadline = time.monotonic() + timeout_s
    try:
        container.start()
        sock.settimeout(timeout_s)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        streams: dict[int, list[bytes]] = {1: [], 2: []}
        buffer = b""
        while True:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 8:
                kind, size = struct.unpack(">BxxxL", buffer[:8])
                if len(buffer) < 8 + size:
                    break
                streams.setdefault(kind, []).append(buffer[8 : 8 + size])
                buffer = buffer[8 + size :]
    except TimeoutError:
        container.kill()
        raise TimeoutError(f"the sandbox container ran past {timeout_s:.0f}s") from None
    finally:
        sock.close()
    return b"".join(streams[1]).decode(), b"".join(streams[2]).decode(errors="replace")


def make_docker_sandbox(config: DockerSandboxConfig, context: BuildContext) -> DockerSandbox:
    """Builds the docker sandbox (it connects to the engine on first use)."""
    return DockerSandbox(config)
