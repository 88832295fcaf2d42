"""``read_stats`` and ``why_not_writable``: a queue file seen from another process,
without writing it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from durable_queue import DurableQueue, read_stats, why_not_writable
from replication import DurableQueueError, Message, QueueCorrupt


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_read_stats_reads_the_backlog_of_a_closed_file_and_leaves_it_as_it_was(
        tmp_path: Path) -> None:
    # Given a queue file with messages for two destinations, closed by its writer
    path = tmp_path / "buffer.db"
    q = DurableQueue(path)
    q.put("primary/orders", Message(b"a", message_id="a"))
    q.put("*/orders", Message(b"bb", message_id="b"))
    q.put("*/orders", Message(b"ccc", message_id="c"))
    q.close()
    before = digest(path)
    # When another process reads its stats
    stats = read_stats(path)
    # Then it sees each destination's backlog, and the file is byte for byte the same
    counts = {d.destination: d.count for d in stats.destinations}
    assert counts == {"*/orders": 2, "primary/orders": 1}
    assert stats.count == 3 and all(d.oldest_enqueued_at for d in stats.destinations)
    assert stats.max_messages is None and stats.commits == 0
    assert digest(path) == before


def test_read_stats_sees_what_an_open_writer_committed(tmp_path: Path) -> None:
    path = tmp_path / "buffer.db"
    with DurableQueue(path) as q:
        q.put("*/orders", Message(b"x"))
        assert read_stats(path).count == 1
        q.put("*/orders", Message(b"y"))
        assert read_stats(path).count == 2


def test_read_stats_of_a_missing_empty_damaged_or_foreign_file(tmp_path: Path) -> None:
    with pytest.raises(DurableQueueError, match="no queue file"):
        read_stats(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()  # nothing was created
    empty = tmp_path / "empty.db"
    empty.touch()
    assert read_stats(empty).count == 0 and empty.stat().st_size == 0
    torn = tmp_path / "torn.db"
    torn.write_bytes(b"not a database" * 100)
    with pytest.raises(QueueCorrupt, match="salvage"):
        read_stats(torn)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(QueueCorrupt, match="not a geogateway queue"):
        read_stats(foreign)


def test_why_not_writable(tmp_path: Path) -> None:
    good = tmp_path / "buffer.db"
    assert why_not_writable(good) is None  # missing: the first put creates it
    DurableQueue(good).close()
    assert why_not_writable(good) is None
    missing_dir = tmp_path / "nowhere" / "buffer.db"
    assert "does not exist" in (why_not_writable(missing_dir) or "")
    (tmp_path / "adir.db").mkdir()
    assert "is a directory" in (why_not_writable(tmp_path / "adir.db") or "")
    torn = tmp_path / "torn.db"
    torn.write_bytes(b"x" * 4096)
    assert "corrupt" in (why_not_writable(torn) or "")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "does not exist" in (why_not_writable(blocker / "buffer.db") or "")
