"""An append-only file per queue, so the parameter server keeps its queues across restarts.

Records (little-endian): kind (1 byte: ``A`` added, ``D`` delivered, ``F`` finished,
``X`` dead, ``N`` dead count so far, written by compaction), id length (u32), payload
length (u32), id, payload. Each record is one ``write`` to a file opened for appending,
so a killed server loses at most the record being written, and a torn last record is
ignored on replay. The page cache holds what was written when the process dies;
``fsync`` (machine crashes) is not attempted.

The file is rewritten with only the live items when it grows past four times their size
(and past 64 MiB), keeping the newest 200,000 finished ids, reading their payloads back
from the old file by offset, so the journal's memory is an offset per live item.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rlax_core.kit.transport import QueueJournal

_HEAD = struct.Struct("<cII")
_COMPACT_FLOOR = 64 << 20
# Finished ids kept across a compaction: a duplicate put of an older one after a server
# restart is accepted again (the queue's de-duplication window is in memory).
_KEPT_DONE = 200_000


@dataclass
class _Live:
    offset: int  # of the payload in the current file
    length: int
    deliveries: int


class FileQueueJournal(QueueJournal):
    """The journal of one queue, in ``path`` (see the module docstring).

    Args:
        path: the journal file (created if absent).
        max_deliveries: the queue's setting; replay counts items that had used up their
            deliveries when the server stopped as dead.
    """

    def __init__(self, path: Path, max_deliveries: int | None = None) -> None:
        self.path = path
        self._max = max_deliveries
        self._live: dict[str, _Live] = {}
        self._live_bytes = 0
        self._done: list[str] = []
        self._dead = 0
        self._replay()
        self._rewrite()  # start from a compact file
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size

    def state(self) -> tuple[list[tuple[str, bytes, int]], list[str], int]:
        """``(items, done ids, dead count)`` for :meth:`LeaseTable.restore`."""
        with self.path.open("rb") as data:
            items = []
            for item_id, live in self._live.items():
                data.seek(live.offset)
                items.append((item_id, data.read(live.length), live.deliveries))
        return items, list(self._done), self._dead

    @property
    def live_items(self) -> int:
        """Items queued or leased (the server's item quota counts them)."""
        return len(self._live)

    @property
    def live_bytes(self) -> int:
        """Bytes of the payloads of those items (the server's byte quota counts them)."""
        return self._live_bytes

    # -- QueueJournal --

    def added(self, item_id: str, payload: bytes) -> None:
        offset = self._append(b"A", item_id, payload)
        self._live[item_id] = _Live(offset, len(payload), 0)
        self._live_bytes += len(payload)

    def delivered(self, item_id: str) -> None:
        self._append(b"D", item_id, b"")
        if item_id in self._live:
            self._live[item_id].deliveries += 1

    def finished(self, item_id: str, dead: bool) -> None:
        self._append(b"X" if dead else b"F", item_id, b"")
        entry = self._live.pop(item_id, None)
        self._live_bytes -= entry.length if entry else 0
        self._done.append(item_id)
        self._dead += int(dead)
        if self._size > max(_COMPACT_FLOOR, 4 * self._live_bytes):
            os.close(self._fd)
            self._rewrite()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o600)
            self._size = os.fstat(self._fd).st_size

    def close(self) -> None:
        """Closes the file."""
        os.close(self._fd)

    # -- file --

    def _append(self, kind: bytes, item_id: str, payload: bytes) -> int:
        key = item_id.encode()
        record = _HEAD.pack(kind, len(key), len(payload)) + key + payload
        os.write(self._fd, record)
        start = self._size
        self._size += len(record)
        return start + _HEAD.size + len(key)

    def _replay(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        at = 0
        while at + _HEAD.size <= len(data):
            kind, key_len, payload_len = _HEAD.unpack_from(data, at)
            end = at + _HEAD.size + key_len + payload_len
            if end > len(data):
                break  # torn last record
            item_id = data[at + _HEAD.size : at + _HEAD.size + key_len].decode()
            if kind == b"A":
                self._live[item_id] = _Live(at + _HEAD.size + key_len, payload_len, 0)
            elif kind == b"D" and item_id in self._live:
                self._live[item_id].deliveries += 1
            elif kind == b"N":
                self._dead = int(item_id)
            elif kind in (b"F", b"X"):
                self._live.pop(item_id, None)
                self._done.append(item_id)
                self._dead += int(kind == b"X")
            at = end
        if self._max is not None:
            for item_id in [i for i, live in self._live.items() if live.deliveries >= self._max]:
                del self._live[item_id]  # it was leased its last time when the server stopped
                self._done.append(item_id)
                self._dead += 1

    def _rewrite(self) -> None:
        """Writes live items, done ids and the dead count to a new file; swaps it in."""
        fresh = self.path.with_suffix(".compacting")
        self._done = self._done[-_KEPT_DONE:]
        old = self.path.open("rb") if self.path.exists() else None
        live: dict[str, _Live] = {}
        try:
            with fresh.open("wb") as out:
                # The dead count is kept as a record of its own ("N", count in the id).
                count = str(self._dead).encode()
                out.write(_HEAD.pack(b"N", len(count), 0) + count)
                for item_id in self._done:
                    key = item_id.encode()
                    out.write(_HEAD.pack(b"F", len(key), 0) + key)
                for item_id, entry in self._live.items():
                    assert old is not None
                    old.seek(entry.offset)
                    payload = old.read(entry.length)
                    key = item_id.encode()
                    out.write(_HEAD.pack(b"A", len(key), len(payload)) + key)
                    live[item_id] = _Live(out.tell(), len(payload), entry.deliveries)
                    out.write(payload)
                    for _ in range(entry.deliveries):
                        out.write(_HEAD.pack(b"D", len(key), 0) + key)
        finally:
            if old is not None:
                old.close()
        fresh.replace(self.path)
        self._live = live
        self._live_bytes = sum(entry.length for entry in live.values())
