"""``salvage``: every message that can still be read from a damaged queue file goes to a
new file, in order, and what could not be read is reported; the damaged file is only
read. Real files, real damage (a page overwritten in the middle), no mocks."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from durable_queue import DurableQueue, salvage
from replication import ConfigError, Message, QueueCorrupt

from ._damage import PAGE, damaged_queue

COUNT = 2000  # about 450 pages of 4 KiB: the damage is one page among many


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def marker(i: int) -> bytes:
    return f"MSG{i:05d}".encode()


def message(i: int) -> Message:
    """Message ``i``: for one of two destinations, with a key and properties."""
    return Message(marker(i) * 100, message_id=f"m{i}", partition_key=f"k{i % 7}",
                   properties={"n": i, "kind": "order" if i % 2 else "refund"})


def dest(i: int) -> str:
    return "primary/orders" if i % 3 else "*/orders"


def build(path: Path) -> None:
    """A queue file of COUNT messages over two destinations (interleaved), one bound,
    and a dead letter; closed, so its WAL is checkpointed into it."""
    with DurableQueue(path, synchronous="OFF") as q:  # setup: no fsync per put
        for i in range(COUNT):
            q.put(dest(i), message(i))
        q.bind("primary/orders", "local://primary entity orders")
        dead = q.get_batch("*/orders", 1)[0]
        q.dead_letter(dead, "too large for the namespace")


def damage_page_of(path: Path, i: int) -> set[int]:
    """Overwrite the page holding message ``i``; return every message stored on it."""
    data = bytearray(path.read_bytes())
    page = data.index(marker(i)) // PAGE
    assert 2 < page < len(data) // PAGE - 2, "the damaged page must be in the middle"
    on_page = {n for n in range(COUNT)
               if (at := data.find(marker(n) * 2)) >= 0 and at // PAGE == page}
    data[page * PAGE : (page + 1) * PAGE] = b"\xa5" * PAGE
    path.write_bytes(bytes(data))
    return on_page


def waiting(path: Path) -> dict[str, list[Message]]:
    with DurableQueue(path) as q:
        q.check()
        return {d: [s.message for s in q.get_batch(d, COUNT)] for d in q.destinations()}


def test_every_message_before_and_after_the_damaged_page_is_recovered_in_order(
    tmp_path: Path,
) -> None:
    # Given a queue file of 2,000 messages whose page holding message 1000 is damaged
    source, target = tmp_path / "buffer.db", tmp_path / "salvaged.db"
    build(source)
    lost = damage_page_of(source, 1000)
    before = digest(source)
    # When it is salvaged
    report = salvage(source, target)
    # Then every message not on the damaged page is in the new file, in order per
    # destination, with its id, key, properties and body
    dead_id = 0  # message 0 ("*/orders") was dead-lettered before the damage
    expected: dict[str, list[Message]] = {}
    for i in range(COUNT):
        if i not in lost and i != dead_id:
            expected.setdefault(dest(i), []).append(message(i))
    assert waiting(target) == expected
    # And the dead letter and the binding came along
    with DurableQueue(target) as q:
        [dead] = q.dead_letters()
        assert dead.message == message(dead_id) and dead.reason == "too large for the namespace"
        assert q.binding("primary/orders") == "local://primary entity orders"
        # And the new file counts right: it takes new messages after the old ones
        assert len(q) == COUNT - 1 - len(lost)
        q.put("*/orders", Message(b"new", message_id="new"))
        assert q.peek("*/orders", limit=COUNT)[-1].message.message_id == "new"
    # And the report says what was lost, where, and whose
    assert 1 <= len(lost) <= 5
    assert report.messages == COUNT - 1 - len(lost) and not report.complete
    [gap] = report.unreadable
    assert (gap.table, gap.count) == ("messages", len(lost))
    assert gap.first_id == min(lost) + 1 and gap.last_id == max(lost) + 1  # ids start at 1
    assert set(gap.destinations) == {dest(i) for i in lost}
    assert sum(d.unreadable or 0 for d in report.destinations) == len(lost)
    assert report.damaged_pages == () or len(report.damaged_pages) == 1
    # And the damaged file was only read, and the new one is private and sound
    assert digest(source) == before
    assert not Path(f"{source}-wal").exists() and not Path(f"{source}-shm").exists()
    assert target.stat().st_mode & 0o777 == 0o600


def test_without_an_index_the_damage_is_stepped_over_by_probing(tmp_path: Path) -> None:
    # Given a damaged file whose index cannot list the rows (dropped here, as when its
    # pages are damaged too)
    source, target = tmp_path / "buffer.db", tmp_path / "salvaged.db"
    build(source)
    conn = sqlite3.connect(source)
    conn.execute("DROP INDEX messages_by_destination")
    conn.execute("VACUUM")
    conn.close()
    lost = damage_page_of(source, 1500)
    # When it is salvaged / Then everything but the damaged page still comes back
    report = salvage(source, target)
    recovered = [m.message_id for ms in waiting(target).values() for m in ms]
    assert sorted(recovered, key=lambda m: int(m[1:])) == [
        f"m{i}" for i in range(1, COUNT) if i not in lost]
    # And the gap is reported as a range of ids, its count unknown
    [gap] = report.unreadable
    assert gap.count is None and gap.first_id <= min(lost) + 1 and gap.last_id is not None
    assert gap.last_id >= max(lost) + 1


def test_an_undamaged_file_is_copied_whole(tmp_path: Path) -> None:
    source, target = tmp_path / "buffer.db", tmp_path / "copy.db"
    build(source)
    report = salvage(source, target)
    assert report.complete and report.messages == COUNT - 1 and report.dead_letters == 1
    assert waiting(target) == waiting(source)


def test_messages_a_crashed_writer_left_in_the_wal_are_salvaged(tmp_path: Path) -> None:
    # Given a file whose writer was killed (SIGKILL) before it could checkpoint its WAL
    source, target = tmp_path / "buffer.db", tmp_path / "salvaged.db"
    script = (
        "import os, sys; from durable_queue import DurableQueue; from replication import "
        "Message\nq = DurableQueue(sys.argv[1])\nfor i in range(500):\n"
        "    q.put('*/orders', Message(b'x' * 500, message_id=f'm{i}'))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(source)], timeout=60)
    assert proc.returncode == -9
    assert Path(f"{source}-wal").stat().st_size > 0
    before = digest(source)
    # When it is salvaged / Then all 500 are in the new file, and the file was not written
    report = salvage(source, target)
    assert report.complete and report.messages == 500
    assert [m.message_id for m in waiting(target)["*/orders"]] == [f"m{i}" for i in range(500)]
    assert digest(source) == before


def test_the_output_is_never_overwritten_without_force(tmp_path: Path) -> None:
    source, target = tmp_path / "buffer.db", tmp_path / "salvaged.db"
    build(source)
    target.write_text("precious")
    with pytest.raises(ConfigError, match="exists: choose another -o, or pass --force"):
        salvage(source, target)
    assert target.read_text() == "precious"
    # With force it is replaced, and a -wal left beside it is not read as part of it
    Path(f"{target}-wal").write_bytes(b"stale")
    report = salvage(source, target, force=True)
    assert report.complete and not Path(f"{target}-wal").exists()
    assert len(waiting(target)["primary/orders"]) > 0


@pytest.mark.parametrize("force", [False, True])
def test_the_source_is_never_the_output(tmp_path: Path, force: bool) -> None:
    source = tmp_path / "buffer.db"
    damaged_queue(source, "*/orders")
    before = digest(source)
    for same in (source, tmp_path / "." / "buffer.db"):
        with pytest.raises(ConfigError, match="is the queue file being salvaged"):
            salvage(source, same, force=force)
    assert digest(source) == before


def test_a_file_whose_first_page_is_damaged_cannot_be_salvaged(tmp_path: Path) -> None:
    source, target = tmp_path / "buffer.db", tmp_path / "salvaged.db"
    build(source)
    data = bytearray(source.read_bytes())
    data[:PAGE] = b"\xa5" * PAGE
    source.write_bytes(bytes(data))
    with pytest.raises(QueueCorrupt, match=r"nothing of .* can be read"):
        salvage(source, target)
    assert not target.exists()
    assert [p for p in os.listdir(tmp_path) if "salvage" in p] == []
