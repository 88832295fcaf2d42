"""Durability: crashes, corrupt files and several processes on one file (no mocks)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_queue import DurableQueue
from replication import QueueCorrupt

from .conftest import msg

WORKERS = str(Path(__file__).with_name("_workers.py"))


def test_sigkill_mid_stream_loses_no_returned_put(queue_path: Path) -> None:
    # Given a child that prints each id once its put has returned
    child = subprocess.Popen(
        [sys.executable, WORKERS, "put_forever", str(queue_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    printed: dict[int, str] = {}
    for line in child.stdout:
        if len(printed) >= 300:
            break
        first, index = line.split()
        printed[int(first)] = f"m{index}"
    # When it is killed mid-stream (it is still putting)
    os.kill(child.pid, signal.SIGKILL)
    rest = child.stdout.read()
    child.stdout.close()
    child.wait()
    assert child.returncode == -signal.SIGKILL
    for line in rest.splitlines():
        parts = line.split()
        if len(parts) == 2:  # the last line may be torn by the kill
            printed[int(parts[0])] = f"m{parts[1]}"
    # Then the file opens cleanly and every id it printed is there, intact
    with DurableQueue(queue_path) as q:
        stored = {s.id: s.message.message_id for s in q.peek("d", limit=1_000_000)}
        for row_id, message_id in printed.items():
            assert stored.get(row_id) == message_id
        assert len(q) == len(stored) >= len(printed)
        assert sorted(stored) == list(range(1, len(stored) + 1))  # no gaps, FIFO


def _fill_and_close(path: Path, count: int = 300) -> None:
    with DurableQueue(path) as q:
        q.put_many("a", [msg(f"m{i}") for i in range(count)])
    assert not Path(f"{path}-wal").exists()  # checkpointed into the main file


def expect_corrupt_and_untouched(path: Path, before: bytes) -> None:
    with pytest.raises(QueueCorrupt) as info, DurableQueue(path) as q:
        q.peek(limit=10_000)
        q.stats()
    text = str(info.value)
    assert str(path) in text and "corrupt" in text and "\n" not in text
    assert path.read_bytes() == before  # never deleted, never emptied


def test_garbage_file_is_corrupt(queue_path: Path) -> None:
    queue_path.write_bytes(os.urandom(8192))
    expect_corrupt_and_untouched(queue_path, queue_path.read_bytes())


def test_short_garbage_file_is_corrupt(queue_path: Path) -> None:
    queue_path.write_bytes(b"hello")
    expect_corrupt_and_untouched(queue_path, b"hello")


def test_file_truncated_mid_page_is_corrupt(queue_path: Path) -> None:
    _fill_and_close(queue_path)
    size = queue_path.stat().st_size
    with queue_path.open("r+b") as fp:
        fp.truncate(size - 1000)
    expect_corrupt_and_untouched(queue_path, queue_path.read_bytes())


def test_file_truncated_at_page_boundary_is_corrupt(queue_path: Path) -> None:
    _fill_and_close(queue_path)
    size = queue_path.stat().st_size
    with queue_path.open("r+b") as fp:
        fp.truncate(size - 8 * 4096)
    expect_corrupt_and_untouched(queue_path, queue_path.read_bytes())


def test_damaged_pages_surface_as_queue_corrupt(queue_path: Path) -> None:
    _fill_and_close(queue_path)
    data = bytearray(queue_path.read_bytes())
    # Scribble over every page after the schema pages, header intact
    for offset in range(4 * 4096, len(data), 4096):
        data[offset : offset + 64] = os.urandom(64)
    queue_path.write_bytes(bytes(data))
    expect_corrupt_and_untouched(queue_path, bytes(data))


def test_another_sqlite_database_is_not_a_queue(queue_path: Path) -> None:
    conn = sqlite3.connect(queue_path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = queue_path.read_bytes()
    with pytest.raises(QueueCorrupt, match="not a geogateway queue"):
        DurableQueue(queue_path)
    assert queue_path.read_bytes() == before


def test_two_producers_and_two_replayers_on_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    stop = tmp_path / "stop"
    outs = [tmp_path / f"out{k}.txt" for k in range(2)]
    DurableQueue(path).close()
    per_producer = 400

    def spawn(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, WORKERS, *args], stderr=subprocess.PIPE, text=True)

    replayers = [spawn("replay", path, str(out), str(stop)) for out in outs]
    producers = [spawn("produce", path, f"p{k}", str(per_producer)) for k in range(2)]
    errors = [p.communicate(timeout=60)[1] for p in producers]
    stop.touch()
    errors += [r.communicate(timeout=60)[1] for r in replayers]
    for proc, err in zip(producers + replayers, errors, strict=True):
        assert proc.returncode == 0, err
        assert "locked" not in err and "Traceback" not in err, err
    delivered = [line for out in outs for line in out.read_text().splitlines()]
    expected = {f"p{k}-{i}" for k in range(2) for i in range(per_producer)}
    assert len(delivered) == len(set(delivered)), "duplicates delivered"
    assert set(delivered) == expected, "lost or unexpected messages"
    # Each replayer delivered every (producer, destination) stream in put order
    for out in outs:
        seen: dict[tuple[str, int], int] = {}
        for mid in out.read_text().splitlines():
            producer, index = mid.split("-")
            key = (producer, (int(index) // 5) % 2)  # its destination
            assert seen.get(key, -1) < int(index), f"{mid} out of order"
            seen[key] = int(index)
    with DurableQueue(path) as q:
        assert len(q) == 0


def test_writer_waits_for_another_process_lock(queue_path: Path) -> None:
    # Given another process holding the write lock for a moment
    DurableQueue(queue_path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(0.7);"
            "c.execute('COMMIT')",
            str(queue_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    # When we put, we wait instead of failing with "database is locked"
    started = time.monotonic()
    with DurableQueue(queue_path, busy_timeout=10) as q:
        q.put("a", msg("waited"))
        assert ids_of_all(q) == ["waited"]
    assert time.monotonic() - started >= 0.3
    holder.wait(timeout=10)
    holder.stdout.close()


def ids_of_all(q: DurableQueue) -> list[str]:
    return [s.message.message_id for s in q.peek(limit=1000)]
