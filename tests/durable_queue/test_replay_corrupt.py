"""A damaged queue file is never written to: a replay finds the damage before it sends
or removes anything, and a handle that met the damage refuses every write."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from durable_queue import DurableQueue, Replayer
from replication import Message, QueueCorrupt

from ._damage import damaged_queue


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_drain_of_a_damaged_file_sends_nothing_and_leaves_it_byte_for_byte(
    tmp_path: Path,
) -> None:
    # Given a queue file whose page holding message 150 (of 300) is damaged
    path = tmp_path / "queue.db"
    damaged_queue(path, "*/orders")
    before = digest(path)
    sent: list[str] = []

    def send(batch: Sequence[Message]) -> None:
        sent.extend(m.message_id for m in batch)

    # When it is drained
    with DurableQueue(path) as q, pytest.raises(QueueCorrupt) as caught:
        Replayer(q, "*/orders").drain(send)
    # Then nothing was sent, and the file is exactly as it was (nothing deleted, no lease)
    assert sent == []
    assert digest(path) == before
    # And the error says so, and what to run
    text = str(caught.value)
    assert str(path) in text and "it was not modified" in text
    assert f"geogateway queue salvage -q {path} -o NEW" in text


@pytest.mark.anyio
async def test_adrain_of_a_damaged_file_sends_nothing_and_takes_no_lease(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queue.db"
    damaged_queue(path, "a/orders")
    before = digest(path)
    sent: list[Message] = []

    async def send(batch: Sequence[Message]) -> None:
        sent.extend(batch)

    with DurableQueue(path) as q:
        with pytest.raises(QueueCorrupt):
            await Replayer(q, "a/orders").adrain(send)
        # And no lease was taken: another replayer may start at once
        assert q.lease_owner("a/orders", now=0.0) is None
    assert sent == [] and digest(path) == before


WRITES: dict[str, Callable[[DurableQueue], object]] = {
    "ack": lambda q: q.ack([1, 2, 3]),
    "nack": lambda q: q.nack([1], error="x"),
    "dead_letter": lambda q: q.dead_letter(1, "rejected"),
    "put": lambda q: q.put("*/orders", Message(b"new", message_id="new")),
    "put_many": lambda q: q.put_many("*/orders", [Message(b"new", message_id="new")]),
    "acquire_lease": lambda q: q.acquire_lease("*/orders", "me", seconds=30, now=0.0),
    "release_lease": lambda q: q.release_lease("*/orders", "me"),
    "bind": lambda q: q.bind("*/orders", "someone"),
    "purge": lambda q: q.purge(),
    "requeue_dead_letters": lambda q: q.requeue_dead_letters(),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_once_a_read_met_the_damage_no_write_touches_the_file(
    tmp_path: Path, write: str
) -> None:
    # Given a handle that read into the damaged page (no check asked for)
    path = tmp_path / "queue.db"
    damaged_queue(path, "*/orders")
    before = digest(path)
    with DurableQueue(path) as q:
        with pytest.raises(QueueCorrupt):
            q.get_batch("*/orders", 300)
        # When anything is written through it / Then it is refused, naming the file
        with pytest.raises(QueueCorrupt, match="it was not modified"):
            WRITES[write](q)
    # And the file is exactly as it was
    assert digest(path) == before


@pytest.mark.parametrize("write", ["ack", "acquire_lease", "bind", "purge"])
def test_the_first_write_of_a_handle_reads_the_whole_file_first(
    tmp_path: Path, write: str
) -> None:
    # Given a damaged file and a handle that has only read its first, sound, pages
    path = tmp_path / "queue.db"
    damaged_queue(path, "*/orders")
    before = digest(path)
    with DurableQueue(path) as q:
        assert len(q.get_batch("*/orders", 3)) == 3
        # When it first writes / Then the damage further in is found first
        with pytest.raises(QueueCorrupt):
            WRITES[write](q)
    assert digest(path) == before


def test_a_handle_that_wrote_before_the_damage_was_found_says_so(tmp_path: Path) -> None:
    # Given a handle that appended to a damaged file (a put does not read it all)
    path = tmp_path / "queue.db"
    damaged_queue(path, "*/orders")
    with DurableQueue(path) as q:
        q.put("*/orders", Message(b"late", message_id="late"))
        # When a read meets the damage / Then the error does not claim the file is as it was
        with pytest.raises(QueueCorrupt) as caught:
            q.get_batch("*/orders", 300)
        assert "nothing was written to it once the damage was found" in str(caught.value)
        assert "not modified" not in str(caught.value)
