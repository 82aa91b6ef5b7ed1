"""The parameter server's queue journal: replay, torn records, compaction, dead items."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlax_core.kit.transport import InProcQueue, LeaseTable
from rlax_transport_grpc import queue_journal
from rlax_transport_grpc.queue_journal import FileQueueJournal


def _queue(path: Path, max_deliveries: int | None = None) -> tuple[InProcQueue, FileQueueJournal]:
    journal = FileQueueJournal(path, max_deliveries)
    table = LeaseTable("q", max_deliveries=max_deliveries, journal=journal)
    table.restore(*journal.state())
    return InProcQueue.of(table), journal


def test_a_restarted_queue_has_its_items_deliveries_and_done_ids(tmp_path: Path) -> None:
    path = tmp_path / "q.journal"
    queue, journal = _queue(path)
    for i in range(4):
        queue.put(f"i{i}", f"p{i}".encode())
    queue.ack(queue.get(60.0))  # i0 done
    leased = queue.get(60.0)  # i1 leased when the server "dies"
    journal.close()
    with path.open("ab") as data:  # the server died in the middle of a record
        data.write(b"A\x05\x00\x00")
    queue, journal = _queue(path)
    assert queue.put("i0", b"again") is False
    assert queue.stats().ready == 3
    again = queue.get(60.0)
    assert (again.item_id, again.payload, again.delivery) == (leased.item_id, b"p1", 2)
    assert [queue.get(60.0).item_id for _ in range(2)] == ["i2", "i3"]
    journal.close()


def test_items_that_used_their_deliveries_come_back_dead(tmp_path: Path) -> None:
    path = tmp_path / "q.journal"
    queue, journal = _queue(path, max_deliveries=2)
    queue.put("poison", b"x")
    queue.nack(queue.get(60.0))
    queue.get(60.0)  # second delivery, never acked: the server dies
    journal.close()
    queue, journal = _queue(path, max_deliveries=2)
    assert queue.stats().dead == 1 and queue.get(60.0, timeout=0) is None
    journal.close()
    queue, journal = _queue(path, max_deliveries=2)  # compacted: the count survives
    assert queue.stats().dead == 1
    journal.close()


def test_the_journal_is_compacted_when_it_outgrows_the_live_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_journal, "_COMPACT_FLOOR", 10_000)
    path = tmp_path / "q.journal"
    queue, journal = _queue(path)
    queue.put("keep", b"k" * 100)
    assert queue.get(600.0).item_id == "keep"  # held, never acked: stays live
    for i in range(200):
        queue.put(f"x{i}", b"x" * 1000)
        queue.ack(queue.get(60.0))
    assert path.stat().st_size < 50_000  # 200 KB were written in all
    journal.close()
    queue, journal = _queue(path)
    lease = queue.get(60.0)
    assert (lease.item_id, lease.payload, lease.delivery) == ("keep", b"k" * 100, 2)
    assert queue.put("x150", b"dup") is False
    journal.close()
