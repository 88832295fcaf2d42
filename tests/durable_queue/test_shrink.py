"""The queue file gives the space of delivered messages back (incremental vacuum)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from durable_queue import DurableQueue, Replayer
from durable_queue._sqlite import file_bytes
from replication import Message

BODY = os.urandom(1024)


def fill(q: DurableQueue, count: int, start: int = 0) -> None:
    for first in range(start, start + count, 500):
        q.put_many("d", [Message(BODY, message_id=f"m{i}") for i in range(first, first + 500)])


def drain(q: DurableQueue, count: int | None = None) -> list[str]:
    sent: list[str] = []
    Replayer(q, "d").drain(lambda b: sent.extend(m.message_id for m in b), max_messages=count)
    return sent


def auto_vacuum(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])
    finally:
        conn.close()


def test_a_drained_queue_file_shrinks(tmp_path: Path) -> None:
    # Given 10,000 messages of 1 KiB buffered (a file of ~12 MB)
    path = tmp_path / "q.db"
    with DurableQueue(path) as q:
        fill(q, 10_000)
        peak = file_bytes(path)
        assert peak > 10_000_000
        # When all of them are replayed
        assert len(drain(q)) == 10_000
        # Then the file is given back to the file system
        assert file_bytes(path) < peak / 10, (file_bytes(path), peak)
        # And the queue works on as before
        fill(q, 1_000, start=10_000)
        assert drain(q) == [f"m{i}" for i in range(10_000, 11_000)]


def test_a_mostly_free_file_shrinks_before_it_is_empty(tmp_path: Path) -> None:
    # Given 10,000 messages of which 8,000 are replayed
    path = tmp_path / "q.db"
    with DurableQueue(path) as q:
        fill(q, 10_000)
        peak = file_bytes(path)
        assert len(drain(q, 8_000)) == 8_000
        # Then the file shrank though 2,000 still wait, and they are intact, in order
        assert file_bytes(path) < peak / 2, (file_bytes(path), peak)
        assert drain(q) == [f"m{i}" for i in range(8_000, 10_000)]


def test_an_older_file_is_converted_once_empty(tmp_path: Path) -> None:
    # Given a file made without incremental vacuum (as geogateway made them before)
    path = tmp_path / "q.db"
    with DurableQueue(path, shrink=False) as q:
        fill(q, 10_000)
    assert auto_vacuum(path) == 0
    peak = file_bytes(path)
    with DurableQueue(path) as q:
        # When most of it is replayed, it cannot shrink yet (that needs a full rewrite)
        drain(q, 9_000)
        assert file_bytes(path) >= peak * 0.9
        # When the rest is replayed, the empty file is converted and shrinks
        assert drain(q) == [f"m{i}" for i in range(9_000, 10_000)]
        assert file_bytes(path) < peak / 10
    assert auto_vacuum(path) == 2


def test_shrink_false_keeps_the_free_pages(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with DurableQueue(path, shrink=False) as q:
        fill(q, 5_000)
        peak = file_bytes(path)
        drain(q)
        assert file_bytes(path) >= peak * 0.9
        # And an explicit shrink() gives it back even so, once empty
        assert q.shrink() > 0
        assert file_bytes(path) < peak / 10
