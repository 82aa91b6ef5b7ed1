"""One namespace of the parameter server: its versions, its queues and their quotas.

The state is rlax-core's in-process machinery: an
:class:`~rlax_core.kit.transport.InProcParameterStore` (retention, atomic visibility,
waiting) holding memory maps of the version files, and a
:class:`~rlax_core.kit.transport.LeaseTable` per queue recording its changes in a file
journal. What is on disk is read defensively: a version folder or a queue file that
does not parse is moved aside with a warning (``.quarantine/``), so a restart never
leaves a namespace unusable.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from pathlib import Path

from rlax_core.kit.transport import InProcParameterStore, InProcQueue, LeaseTable
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.limits import QuotaExceededError
from rlax_transport_grpc.queue_journal import FileQueueJournal
from rlax_transport_grpc.versions_on_disk import (
    committed_versions,
    map_version,
    quarantine,
    remove_versions,
)

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_ITEM_ID = 1024


def check_name(name: str, what: str) -> str:
    """``name`` if it is a namespace or queue name (letters, digits, ``-``, ``_``; 1-64).

    Raises:
        ValueError: it is not.
    """
    if not NAME.match(name):
        raise ValueError(f"{what} names use 1-64 letters, digits, '-' and '_'; got {name[:80]!r}")
    return name


class Namespace:
    """The store and queues of one namespace, with its versions in ``folder``."""

    def __init__(self, name: str, folder: Path, config: GrpcTransportConfig) -> None:
        self.name = name
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config = config
        # Clients verify every tensor end to end; the server verifies uploads only.
        self.store = InProcParameterStore(keep_last=config.keep_versions, verify_checksums=False)
        self.queues: dict[str, InProcQueue] = {}
        self._journals: dict[str, FileQueueJournal] = {}
        self.lock = threading.Lock()  # commits, queue creation
        self._put_lock = threading.Lock()  # quota checks and puts together
        limits = config.server.manifest_limits
        for _, path, manifest in committed_versions(folder, limits)[-config.keep_versions :]:
            self.store.adopt_version(manifest, map_version(path, manifest))
        remove_versions(folder, set(self.store.versions()))

    def existing_queue(self, name: str) -> InProcQueue | None:
        """The named queue if it was ever created (restored from its journal), else None."""
        check_name(name, "queue")
        with self.lock:
            if name in self.queues:
                return self.queues[name]
            if not (self.folder / "queues" / f"{name}.json").exists():
                return None
        return self.queue(name)

    def queue(self, name: str, max_deliveries: int | None = None) -> InProcQueue:
        """The named queue, created (or restored from its journal) the first time.

        Raises:
            ValueError: a bad name.
            QuotaExceededError: the namespace holds ``server.max_queues`` queues.
        """
        check_name(name, "queue")
        with self.lock:
            if name not in self.queues:
                self.queues[name] = self._open_queue(name, max_deliveries)
            return self.queues[name]

    def put(self, name: str, item_id: str, payload: bytes) -> bool:
        """Puts an item, within the quotas.

        Raises:
            ValueError: a bad name or item id.
            QuotaExceededError: the queue holds ``max_queue_items`` items, or would hold
                more than ``max_queue_mb`` of payloads.
        """
        if not 0 < len(item_id) <= MAX_ITEM_ID:
            raise ValueError(f"item ids are 1-{MAX_ITEM_ID} characters; got {len(item_id)}")
        queue = self.queue(name)
        server = self.config.server
        with self._put_lock:
            journal = self._journals[name]
            if journal.live_items >= server.max_queue_items:
                raise QuotaExceededError(
                    f"queue {name!r} of namespace {self.name!r} holds {journal.live_items} "
                    f"items, the most server.max_queue_items allows; take some off first"
                )
            if journal.live_bytes + len(payload) > server.max_queue_mb << 20:
                raise QuotaExceededError(
                    f"queue {name!r} of namespace {self.name!r} holds {journal.live_bytes} "
                    f"bytes; this {len(payload)}-byte item would pass server.max_queue_mb "
                    f"({server.max_queue_mb} MiB)"
                )
            return queue.put(item_id, payload)

    def close(self) -> None:
        """Closes the store (waking its watchers)."""
        self.store.close()

    def _open_queue(self, name: str, max_deliveries: int | None) -> InProcQueue:
        folder = self.folder / "queues"
        folder.mkdir(exist_ok=True)
        settings = folder / f"{name}.json"
        if not settings.exists() and len(list(folder.glob("*.json"))) >= (
            self.config.server.max_queues
        ):
            raise QuotaExceededError(
                f"namespace {self.name!r} holds {self.config.server.max_queues} queues, the "
                f"most server.max_queues allows; queue {name!r} was not made"
            )
        try:
            return self._restore_queue(folder, name, max_deliveries)
        except (ValueError, KeyError, TypeError, OSError) as exc:
            # A queue whose files do not parse is set aside; the namespace stays usable.
            for path in (settings, folder / f"{name}.journal"):
                if path.exists():
                    quarantine(path, f"queue {name!r} could not be restored: {exc}")
            return self._restore_queue(folder, name, max_deliveries)

    def _restore_queue(self, folder: Path, name: str, max_deliveries: int | None) -> InProcQueue:
        settings = folder / f"{name}.json"
        if settings.exists():  # the setting it was created with, before a restart
            max_deliveries = json.loads(settings.read_text())["max_deliveries"]
            if max_deliveries is not None and not (
                isinstance(max_deliveries, int) and max_deliveries >= 1
            ):
                raise ValueError(f"max_deliveries {max_deliveries!r}")
        else:
            max_deliveries = max_deliveries or self.config.max_deliveries
            settings.write_text(json.dumps({"max_deliveries": max_deliveries}))
        journal = FileQueueJournal(folder / f"{name}.journal", max_deliveries)
        table = LeaseTable(
            name,
            dedupe_window_s=self.config.dedupe_window_s,
            max_deliveries=max_deliveries,
            journal=journal,
            max_lease_s=self.config.server.max_lease_s,
        )
        table.restore(*journal.state())
        self._journals[name] = journal
        return InProcQueue.of(table)


def count_namespaces(state_dir: Path, loaded: Mapping[str, object]) -> int:
    """Namespaces the server holds: those loaded and those on disk."""
    on_disk = {p.name for p in state_dir.iterdir() if p.is_dir() and NAME.match(p.name)}
    return len(on_disk | set(loaded))
