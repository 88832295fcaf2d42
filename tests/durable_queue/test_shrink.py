"""The queue file gives the space of delivered messages back (incremental vacuum)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

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
    # Given 10,000 messages of which 9,500 are replayed (a namespace went down again)
    path = tmp_path / "q.db"
    with DurableQueue(path) as q:
        fill(q, 10_000)
        q.put("other", Message(b"dead", message_id="dead"))
        q.dead_letter(q.peek("other")[0], "rejected for the test")
        peak = file_bytes(path)
        assert len(drain(q, 9_500)) == 9_500
        # Then the file shrank though 500 still wait
        assert file_bytes(path) < peak / 5, (file_bytes(path), peak)
        # And what waits is intact, in order, the dead letter too, and new ids
        # still come after the old ones
        assert [d.message.message_id for d in q.dead_letters()] == ["dead"]
        new_id = q.put("d", Message(BODY, message_id="new"))
        assert new_id > 10_001
        assert drain(q) == [f"m{i}" for i in range(9_500, 10_000)] + ["new"]


def test_a_queue_in_use_below_the_thresholds_is_left_alone(tmp_path: Path) -> None:
    # Given 10,000 messages of which half are replayed
    path = tmp_path / "q.db"
    with DurableQueue(path) as q:
        fill(q, 10_000)
        drain(q, 5_000)
        # Then the freed pages are kept for the next puts (no rewrite of 5,000)
        assert auto_free_pages(path) > 0


def auto_free_pages(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        conn.close()


def test_shrink_false_keeps_the_free_pages(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with DurableQueue(path, shrink=False) as q:
        fill(q, 5_000)
        peak = file_bytes(path)
        drain(q)
        assert file_bytes(path) >= peak * 0.9
        # And an explicit shrink() gives it back even so
        assert q.shrink() > 0
        assert file_bytes(path) < peak / 10


def test_ack_without_shrink_leaves_it_to_maybe_shrink(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with DurableQueue(path) as q:
        fill(q, 5_000)
        peak = file_bytes(path)
        while batch := q.get_batch("d", 500):
            q.ack(batch, shrink=False)
        assert file_bytes(path) >= peak * 0.9
        assert q.maybe_shrink() is True
        assert file_bytes(path) < peak / 10
        assert q.maybe_shrink() is False  # nothing left to give back


@pytest.mark.anyio
async def test_adrain_shrinks_the_file_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    sent: list[str] = []

    async def send(batch: Sequence[Message]) -> None:
        sent.extend(m.message_id for m in batch)

    with DurableQueue(path) as q:
        fill(q, 10_000)
        peak = file_bytes(path)
        result = await Replayer(q, "d").adrain(send)
        assert result.replayed == 10_000 and sent == [f"m{i}" for i in range(10_000)]
        assert file_bytes(path) < peak / 10
