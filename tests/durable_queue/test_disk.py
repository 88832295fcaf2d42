"""The queue on a small disk: a full disk is ``QueueFull`` naming the space needed, the
queue stops early enough to be replayed, and the write-ahead log stays small.

The disk is a real 2 MiB tmpfs (``mount`` needs root; the tests that need it are
skipped with the reason otherwise); the WAL test needs none.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from durable_queue import DurableQueue, Replayer
from durable_queue import _space as space
from replication import Message, QueueFull

KIB = 1024


def on_disk(path: Path) -> int:
    """The queue's bytes on disk: the file, its -wal and its -shm."""
    return sum(os.stat(p).st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
               if p.exists())


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on a fresh 2 MiB tmpfs, unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs here (needs root): {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(q: DurableQueue) -> tuple[list[str], QueueFull, int]:
    """Put 1 KiB messages one at a time (one commit each, as a sender buffering during
    an outage does) until the queue says it is full. Returns their ids, the error, and
    the most the files on disk ever held beyond twice the payload."""
    ids: list[str] = []
    excess = 0
    while True:
        message = Message(os.urandom(1000), message_id=f"m{len(ids):05d}")
        try:
            q.put("*/orders", message)
        except QueueFull as exc:
            return ids, exc, excess
        ids.append(message.message_id)
        excess = max(excess, on_disk(q.path) - 2 * len(ids) * 1000)


def test_a_full_disk_is_queue_full_naming_the_space_needed_and_still_replays(
    small_disk: Path,
) -> None:
    # Given a queue alone on a 2 MiB disk
    path = small_disk / "buffer.db"
    with DurableQueue(path) as q:
        # When it is filled until it is full
        ids, full, excess = fill(q)
        # Then QueueFull says how much is free, where, and how much more is needed
        text = str(full)
        assert str(path) in text and str(small_disk) in text and "\n" not in text
        free, more = (int(n.replace(",", "")) for n in
                      re.search(r"\(([\d,]+) bytes free in .*free at least ([\d,]+) more "
                                r"bytes", text).groups())  # type: ignore[union-attr]
        assert more > 0 and free + more >= space.RESERVE
        # And the disk held most of what it could: at no point did the files hold more
        # than twice the payload, plus the schema, the -shm and a small write-ahead log
        # (at SQLite's default the log alone grew to 2 MiB, and 183 KiB fitted)
        payload = len(ids) * 1000
        assert payload >= 768 * KIB, f"only {payload // KIB} KiB fitted on 2 MiB"
        assert excess <= 256 * KIB, f"{excess // KIB} KiB over twice the payload"
        # And the full queue can still be replayed to the end, in order: the reserve
        # leaves room for the deletes
        sent: list[str] = []

        def send(batch: Sequence[Message]) -> None:
            sent.extend(m.message_id for m in batch)

        result = Replayer(q, "*/orders").drain(send)
        assert sent == ids and result.remaining == 0 and len(q) == 0
        # And it takes messages again
        q.put("*/orders", Message(b"again", message_id="again"))


def test_a_disk_filled_past_the_reserve_is_queue_full_too(small_disk: Path) -> None:
    # Given a queue whose check of the free space is told the disk is empty (as when
    # another process fills it between the check and the write), so that SQLite
    # itself meets the full disk
    path = small_disk / "buffer.db"
    with DurableQueue(path) as q:
        q._store.room = space.DiskRoom(path, free=lambda _: 1 << 40)
        # When it is filled / Then SQLite's "database or disk is full" is QueueFull,
        # naming the free space and what to do (it was a bare DurableQueueError)
        ids, full, _ = fill(q)
        assert ids, "nothing fitted at all"
        assert re.search(r"the disk is full \([\d,]+ bytes free in ", str(full)), full
        assert "free at least" in str(full) and "larger disk" in str(full)
        # And what was stored before is all there
        assert [m.message.message_id for m in q.peek(limit=len(ids) + 1)] == ids


def test_on_a_nearly_full_disk_the_log_stays_within_twice_the_payload(tmp_path: Path) -> None:
    # Given a queue on what it measures as a 2 MiB disk (no root needed: the free
    # space it asks for is that of a 2 MiB disk holding its files)
    path = tmp_path / "buffer.db"
    with DurableQueue(path) as q:
        q._store.room = space.DiskRoom(path, free=lambda _: (2 << 20) - on_disk(path))
        # When it takes 1 KiB messages, one commit each, until it is full
        ids, _, excess = fill(q)
        # Then at no point did the files hold more than twice the payload, plus the
        # schema, the -shm and a small log (SQLite's default let the -wal grow to 4 MB,
        # 8 times a 512 KiB backlog), and most of the disk was used
        assert excess <= 256 * KIB, f"{excess // KIB} KiB over twice the payload"
        assert len(ids) * 1000 >= 768 * KIB
        # And a drain of all of it leaves the log small too
        Replayer(q, "*/orders").drain(lambda batch: None)
        wal = Path(f"{path}-wal")
        assert not wal.exists() or wal.stat().st_size <= 256 * KIB


def test_with_room_on_the_disk_the_log_keeps_sqlites_default(tmp_path: Path) -> None:
    # Given a queue on a disk with plenty of room, Then its log is checkpointed at
    # SQLite's default (1000 pages): batched puts and acks need the fewer checkpoints
    with DurableQueue(tmp_path / "buffer.db") as q:
        q._store.room = space.DiskRoom(q.path, free=lambda _: 1 << 40)
        q.put("*/orders", Message(b"a", message_id="a"))
        conn = q._store.live()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        # And on the same disk nearly full, a small one
        q._store.room = space.DiskRoom(q.path, free=lambda _: 1 << 20)
        q.put("*/orders", Message(b"b", message_id="b"))
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 32
