"""Where a run's files live: a local path, ``gs://bucket/…`` or ``s3://bucket/…``.

Every path a run reads or writes (``model.path``, ``model.tokenizer``, dataset paths,
``run.run_dir``) goes through :func:`storage_path`. Local paths stay :class:`pathlib.Path`;
object-store URLs become etils' ``epath.Path`` — pathlib's API over fsspec (gcsfs for
``gs://``, s3fs for ``s3://``), the same layer Orbax writes checkpoints through. The
object-store libraries are optional extras (``rlax-core[gcs]``, ``rlax-core[s3]``), so a
local run installs neither; a URL whose library is missing is a :class:`ConfigError`
naming the extra.

Credentials and endpoints come from each library's usual environment: Application
Default Credentials or the metadata server (Workload Identity) for Cloud Storage,
``AWS_*`` variables or an instance role for S3; ``STORAGE_EMULATOR_HOST`` and
``AWS_ENDPOINT_URL`` point them at emulators.

Object stores have no append and no rename-into-place, so files a run appends to
(``metrics.jsonl``, TensorBoard event files) are written to a local :class:`Mirror` and
uploaded whole, in the background and when the run asks (at each committed checkpoint);
an object is replaced atomically, so a reader sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Union

from rlax_core.errors import ConfigError

if TYPE_CHECKING:
    from etils import epath

log = logging.getLogger(__name__)

# URL scheme → (the fsspec implementation's module, the rlax-core extra that installs it).
REMOTE_SCHEMES = {"gs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3")}

AnyPath = Union[Path, "epath.Path"]


def remote_scheme(path: str | os.PathLike[str]) -> str | None:
    """``gs`` or ``s3`` when ``path`` is an object-store URL, else None."""
    text = str(path)
    scheme, sep, _ = text.partition("://")
    return scheme if sep and scheme in REMOTE_SCHEMES else None


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object in a bucket (``gs://…``, ``s3://…``)."""
    return remote_scheme(path) is not None


def storage_path(value: str | os.PathLike[str], base_dir: Path | None = None) -> AnyPath:
    """The path a config value names: a URL as ``epath.Path``, else a local path
    (``~`` expanded, relative to ``base_dir`` when given).

    Raises:
        ConfigError: an object-store URL whose library is not installed, or one that
            names no bucket.
    """
    text = os.fspath(value) if not isinstance(value, str) else value
    scheme = remote_scheme(text)
    if scheme is None:
        if "://" in text:
            raise ConfigError(
                f"{text}: unknown storage scheme {text.split('://')[0]!r}; paths are local, "
                "gs://BUCKET/… or s3://BUCKET/…"
            )
        path = Path(text).expanduser()
        return path if base_dir is None or path.is_absolute() else base_dir / path
    if not text.split("://", 1)[1].split("/", 1)[0]:
        raise ConfigError(f"{text}: names no bucket; write {scheme}://BUCKET/PATH")
    require_backend(scheme, text)
    _no_listing_cache()
    from etils import epath

    return epath.Path(text.rstrip("/"))


def require_backend(scheme: str, what: str) -> None:
    """Raises :class:`ConfigError` when the library for ``scheme`` is not installed."""
    module, extra = REMOTE_SCHEMES[scheme]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"{what}: {scheme}:// paths need {module}, which is not installed; "
            f"pip install 'rlax-core[{extra}]'"
        )


def _no_listing_cache() -> None:
    """Makes every gcsfs and s3fs client list afresh: several processes write a run
    directory (status files, checkpoints), and a cached listing would hide their files."""
    import fsspec.config

    for protocol in ("gs", "gcs", "s3", "s3a"):
        fsspec.config.conf.setdefault(protocol, {})["use_listings_cache"] = False


def filesystem(path: AnyPath):
    """The fsspec file system of a remote path (for ranged reads and bulk copies)."""
    import fsspec

    _no_listing_cache()
    scheme = remote_scheme(path)
    if scheme is None:
        return fsspec.filesystem("file")
    return fsspec.filesystem(scheme)


def write_text_atomically(path: AnyPath, text: str) -> None:
    """Replaces ``path`` with ``text`` so that a reader sees the old file or the new one.

    Locally through a temporary file and a rename; an object is replaced whole by its
    store already.
    """
    if is_remote(path):
        path.write_text(text)
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def upload_tree(local: Path, remote: AnyPath) -> set[str]:
    """Copies the files under ``local`` to ``remote`` (the same relative names); the URLs
    written."""
    files = [p for p in sorted(local.rglob("*")) if p.is_file()]
    targets = [f"{remote}/{p.relative_to(local).as_posix()}" for p in files]
    if files:
        filesystem(remote).put([str(p) for p in files], targets)
    return set(targets)


def download_tree(remote: AnyPath, local: Path) -> None:
    """Copies the objects under ``remote`` into ``local`` (made if missing)."""
    fs = filesystem(remote)
    prefix = str(remote).split("://", 1)[1].rstrip("/")
    names = [n for n in fs.find(str(remote)) if not n.endswith("/")]
    local.mkdir(parents=True, exist_ok=True)
    sources, targets = [], []
    for name in names:
        relative = name[len(prefix) :].lstrip("/")
        target = local / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        sources.append(f"{remote_scheme(remote)}://{name}")
        targets.append(str(target))
    if sources:
        fs.get(sources, targets)


def cache_dir() -> Path:
    """Where local copies of remote files go: ``$RLAX_CACHE_DIR`` or ``~/.cache/rlax``."""
    return Path(os.environ.get("RLAX_CACHE_DIR") or Path.home() / ".cache" / "rlax")


@contextlib.contextmanager
def staged_folder(target: AnyPath) -> Iterator[Path]:
    """A local folder to write ``target``'s files into: ``target`` itself when local, else
    a temporary folder uploaded to ``target`` when the block ends without an error (the
    objects under ``target`` are then exactly the folder's files)."""
    if not is_remote(target):
        target.mkdir(parents=True, exist_ok=True)
        yield target
        return
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="staged-", dir=cache_dir()) as staging:
        yield Path(staging)
        written = upload_tree(Path(staging), target)
        fs = filesystem(target)
        stale = [
            name for name in fs.find(str(target))
            if f"{remote_scheme(target)}://{name}" not in written
        ]  # fmt: skip
        if stale:
            fs.rm(stale)


class Mirror:
    """A local folder whose files are uploaded to a remote folder, whole, in the background.

    For files a process appends to (``metrics.jsonl``, event files): they are written
    locally, and :meth:`push` asks for an upload of everything that changed. Uploads run
    on one thread and coalesce: many pushes while one upload runs make one more upload.
    A failed upload is logged and retried at the next push; :meth:`flush` uploads now
    and raises what fails.

    Args:
        remote: the remote folder (``epath.Path``).
        pull: names under ``remote`` to download into the mirror first (those that exist).
    """

    def __init__(self, remote: AnyPath, *, pull: tuple[str, ...] = ()) -> None:
        self.remote = remote
        key = hashlib.sha256(str(remote).encode()).hexdigest()[:16]
        self.local = cache_dir() / "mirrors" / f"{key}-{os.getpid()}"
        shutil.rmtree(self.local, ignore_errors=True)
        self.local.mkdir(parents=True)
        fs = filesystem(remote)
        for name in pull:
            source = f"{remote}/{name}"
            if fs.exists(source):
                fs.get(source, str(self.local / name))
        self._uploaded: dict[Path, tuple[int, int]] = {
            p: _signature(p) for p in self.local.rglob("*") if p.is_file()
        }
        self._lock = threading.Lock()  # one upload at a time
        self._wanted = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rlax-mirror", daemon=True)
        self._thread.start()

    def push(self) -> None:
        """Asks for the changed files to be uploaded soon; returns at once."""
        self._wanted.set()

    def flush(self) -> None:
        """Uploads every changed file now.

        Raises:
            OSError: an upload failed (the store's error).
        """
        with self._lock:
            for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
                signature = _signature(path)
                if self._uploaded.get(path) == signature:
                    continue
                target = f"{self.remote}/{path.relative_to(self.local).as_posix()}"
                filesystem(self.remote).put_file(str(path), target)
                self._uploaded[path] = signature

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closed:
                return
            try:
                self.flush()
            except Exception as exc:  # the next push retries; close() raises
                log.warning(
                    "uploading %s to %s failed (%s); retrying", self.local, self.remote, exc
                )

    def close(self) -> None:
        """Uploads what changed, stops the thread and removes the local folder."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._wanted.set()
            self._thread.join(timeout=60)
            with contextlib.suppress(OSError):
                shutil.rmtree(self.local)


def _signature(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns
