"""The queue's own operations, on real files under tmp_path."""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

import durable_queue
from durable_queue import DurableQueue, QueueStats, StoredMessage
from replication import ConfigError, DurableQueueError, Message, QueueFull

from .conftest import msg


def ids_of(items: list[StoredMessage]) -> list[str]:
    return [i.message.message_id for i in items]


def test_put_returns_increasing_ids_and_peek_is_fifo(queue: DurableQueue) -> None:
    # Given messages put for two interleaved destinations
    ids = [queue.put("a" if i % 2 else "b", msg(f"m{i}")) for i in range(6)]
    # Then ids increase, each destination is FIFO and peek has no side effect
    assert ids == sorted(ids) and len(set(ids)) == 6
    assert ids_of(queue.peek("a")) == ["m1", "m3", "m5"]
    assert ids_of(queue.peek("b")) == ["m0", "m2", "m4"]
    assert ids_of(queue.peek(limit=4)) == ["m0", "m1", "m2", "m3"]
    assert ids_of(queue.peek()) == [f"m{i}" for i in range(6)]
    assert len(queue) == 6
    assert queue.destinations() == ["a", "b"]


def test_oldest_is_when_the_first_waiting_message_of_a_destination_was_put(
    queue: DurableQueue,
) -> None:
    # Given two messages for "a" and one for "b"
    assert queue.oldest("a") is None
    queue.put("a", msg("m0"))
    queue.put("b", msg("m1"))
    queue.put("a", msg("m2"))
    first, second = queue.get_batch("a")
    # Then "a"'s oldest is its first message's put time, until that one is acked
    assert queue.oldest("a") == first.enqueued_at
    queue.ack([first])
    assert queue.oldest("a") == second.enqueued_at
    queue.ack([second])
    assert queue.oldest("a") is None
    assert queue.oldest("b") == queue.get_batch("b")[0].enqueued_at


def test_message_fields_round_trip(queue: DurableQueue) -> None:
    original = Message(
        body=b"\x00\xffbin", message_id="x1", partition_key="pk", properties={"n": 1, "s": "v"}
    )
    row_id = queue.put("a", original)
    [stored] = queue.get_batch("a")
    assert stored.id == row_id
    assert stored.destination == "a"
    assert stored.message == original
    assert stored.message.body == b"\x00\xffbin"
    assert stored.message.partition_key == "pk"
    assert dict(stored.message.properties) == {"n": 1, "s": "v"}
    assert stored.attempts == 0
    assert stored.size == original.size


def test_a_session_id_round_trips_through_put_dead_letters_and_export(
        queue: DurableQueue) -> None:
    # Given messages of a session, with and without properties, and one of no session
    with_props = Message(b"a", message_id="s1", properties={"n": 1}, session_id="order-7")
    bare = Message(b"b", message_id="s2", session_id="order-7")
    queue.put_many("a", [with_props, bare, msg("plain")])
    # Then a batch gives them back as they were, the session id apart from the properties
    got = [s.message for s in queue.get_batch("a")]
    assert got == [with_props, bare, msg("plain")]
    assert [(m.session_id, dict(m.properties)) for m in got] == [
        ("order-7", {"n": 1}), ("order-7", {}), (None, {})]
    # And a dead letter requeued keeps its session, as does the export
    queue.dead_letter(queue.get_batch("a")[1], "no")
    assert [d.message.session_id for d in queue.dead_letters()] == ["order-7"]
    assert queue.requeue_dead_letters() == 1
    assert [s.message for s in queue.get_batch("a")][-1] == bare
    out = io.StringIO()
    queue.export(out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["message_id"], r.get("session_id"), r["properties"]) for r in lines] == [
        ("s1", "order-7", {"n": 1}), ("plain", None, {}), ("s2", "order-7", {})]


def test_get_batch_ack_and_nack(queue: DurableQueue) -> None:
    queue.put_many("a", [msg(f"m{i}") for i in range(5)])
    batch = queue.get_batch("a", 2)
    assert ids_of(batch) == ["m0", "m1"]
    # When the batch fails, it stays at the head with its attempt counted
    queue.nack(batch, error="boom")
    again = queue.get_batch("a", 3)
    assert ids_of(again) == ["m0", "m1", "m2"]
    assert [i.attempts for i in again] == [1, 1, 0]
    # When acked (by record or by id), the messages are gone for good
    queue.ack(again[:2])
    queue.ack([again[2].id])
    queue.ack([again[2].id])  # idempotent
    assert ids_of(queue.get_batch("a")) == ["m3", "m4"]
    assert len(queue) == 2 and queue.count("a") == 2 and queue.count("zzz") == 0


def test_put_many_is_one_transaction_in_order(queue: DurableQueue) -> None:
    ids = queue.put_many("a", [msg(f"m{i}") for i in range(100)])
    assert ids == list(range(ids[0], ids[0] + 100))
    assert queue.commits == 1
    assert queue.put_many("a", []) == []
    assert ids_of(queue.get_batch("a", 1000)) == [f"m{i}" for i in range(100)]


def test_dead_letter_and_requeue(queue: DurableQueue) -> None:
    queue.put_many("a", [msg("m0"), msg("m1"), msg("m2")])
    queue.put("b", msg("b0"))
    head = queue.get_batch("a")
    # When one message is dead-lettered, the rest of the destination moves on
    queue.dead_letter(head[1], "too large")
    assert ids_of(queue.get_batch("a")) == ["m0", "m2"]
    [dead] = queue.dead_letters()
    assert dead.message.message_id == "m1" and dead.reason == "too large"
    assert dead.destination == "a" and dead.attempts == 1
    assert queue.dead_letters("b") == []
    queue.dead_letter(head[1], "again")  # no longer waiting: nothing happens
    assert len(queue.dead_letters()) == 1
    # When requeued, it goes to the tail with a new id
    assert queue.requeue_dead_letters("a") == 1
    tail = queue.get_batch("a")
    assert ids_of(tail) == ["m0", "m2", "m1"]
    assert tail[-1].id > head[2].id
    assert queue.dead_letters() == []
    assert queue.requeue_dead_letters() == 0


def test_stats(queue: DurableQueue) -> None:
    queue.put_many("a", [msg("a0"), msg("a1")])
    queue.put("b", msg("b0"))
    queue.dead_letter(queue.get_batch("b")[0], "no")
    stats = queue.stats()
    assert isinstance(stats, QueueStats)
    assert stats.count == 2 and stats.dead_letters == 1
    assert stats.bytes == msg("a0").size + msg("a1").size
    [a, b] = stats.destinations
    assert (a.destination, a.count, a.dead_letters) == ("a", 2, 0)
    assert (b.destination, b.count, b.dead_letters, b.oldest_enqueued_at) == ("b", 0, 1, None)
    assert a.oldest_enqueued_at == queue.peek("a")[0].enqueued_at
    assert stats.file_bytes > 0 and stats.commits == 2


def test_export_json_lines(queue: DurableQueue) -> None:
    queue.put("a", Message(body="héllo".encode(), message_id="t", properties={"k": True}))
    queue.put("a", Message(body=b"\xff\x00", message_id="bin"))
    queue.put("b", msg("b0"))
    queue.dead_letter(queue.get_batch("b")[0], "rejected")
    out = io.StringIO()
    assert queue.export(out, "a") == 2
    text, binary = (json.loads(line) for line in out.getvalue().splitlines())
    assert text["body"] == "héllo" and text["body_encoding"] == "utf-8"
    assert text["properties"] == {"k": True} and text["dead_letter"] is False
    assert binary["body_encoding"] == "base64"
    assert base64.b64decode(binary["body"]) == b"\xff\x00"
    everything = io.StringIO()
    assert queue.export(everything, include_dead_letters=True) == 3
    last = json.loads(everything.getvalue().splitlines()[-1])
    assert last["dead_letter"] is True and last["reason"] == "rejected"
    assert len(queue) == 2  # export removes nothing


def test_purge_and_ids_are_never_reused(queue: DurableQueue) -> None:
    queue.put_many("a", [msg("a0"), msg("a1")])
    last = queue.put("b", msg("b0"))
    assert queue.purge("a") == 2
    assert queue.destinations() == ["b"]
    assert queue.purge() == 1 and len(queue) == 0
    # A stale ack of an old id must never hit a new message
    assert queue.put("a", msg("new")) > last


def test_queue_full_by_count_loses_nothing(queue_path: Path) -> None:
    q = DurableQueue(queue_path, max_messages=3)
    q.put_many("a", [msg("m0"), msg("m1")])
    # When a batch would overflow, none of it is stored
    with pytest.raises(QueueFull, match="full"):
        q.put_many("a", [msg("x0"), msg("x1")])
    q.put("a", msg("m2"))
    with pytest.raises(QueueFull):
        q.put("a", msg("m3"))
    assert ids_of(q.peek("a")) == ["m0", "m1", "m2"]
    # When space is freed, puts succeed again
    q.ack(q.get_batch("a", 1))
    q.put("a", msg("m3"))
    assert ids_of(q.peek("a")) == ["m1", "m2", "m3"]
    q.close()


def test_queue_full_by_bytes(queue_path: Path) -> None:
    q = DurableQueue(queue_path, max_messages=None, max_bytes=2500)
    q.put("a", Message(body=b"x" * 1000, message_id="1"))
    q.put("a", Message(body=b"x" * 1000, message_id="2"))
    with pytest.raises(QueueFull):
        q.put("a", Message(body=b"x" * 1000, message_id="3"))
    q.put("a", Message(body=b"x" * 100, message_id="4"))  # a smaller one still fits
    assert [s.message.message_id for s in q.peek("a")] == ["1", "2", "4"]
    assert q.stats().bytes <= 2500
    q.close()


def test_caps_hold_across_handles_on_one_file(queue_path: Path) -> None:
    # Two handles (as two processes would) share the cap: counts live in the file
    first = DurableQueue(queue_path, max_messages=4)
    second = DurableQueue(queue_path, max_messages=4)
    first.put("a", msg("1"))
    second.put("a", msg("2"))
    first.put("a", msg("3"))
    second.put("a", msg("4"))
    with pytest.raises(QueueFull):
        first.put("a", msg("5"))
    second.ack(second.get_batch("a", 2))
    first.put("a", msg("5"))
    first.put("a", msg("6"))
    with pytest.raises(QueueFull):
        second.put("a", msg("7"))
    assert ids_of(first.peek("a")) == ["3", "4", "5", "6"]
    assert len(first) == len(second) == 4
    first.close()
    second.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_messages": 0},
        {"max_messages": -1},
        {"max_messages": True},
        {"max_messages": "10"},
        {"max_bytes": 0},
        {"synchronous": "FAST"},
        {"busy_timeout": 0},
        {"busy_timeout": "1"},
    ],
)
def test_bad_options_are_rejected(queue_path: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DurableQueue(queue_path, **kwargs)  # type: ignore[arg-type]
    assert not queue_path.exists()


def test_bad_arguments_are_rejected(queue: DurableQueue) -> None:
    with pytest.raises(ValueError):
        queue.put("", msg("x"))
    with pytest.raises(TypeError):
        queue.put("a", b"not a message")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.put_many("a", [msg("x"), "y"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        queue.peek(limit=0)
    with pytest.raises(ValueError):
        queue.get_batch("a", 0)
    assert len(queue) == 0


def test_closed_queue_raises(queue_path: Path) -> None:
    with DurableQueue(queue_path) as q:
        q.put("a", msg("x"))
    q.close()  # idempotent
    with pytest.raises(DurableQueueError, match="closed"):
        q.put("a", msg("y"))
    with DurableQueue(queue_path) as again:
        assert ids_of(again.peek()) == ["x"]


def test_files_are_owner_only(queue_path: Path) -> None:
    old = os.umask(0o022)
    try:
        q = DurableQueue(queue_path)
        q.put("a", msg("secret"))
        for suffix in ("", "-wal", "-shm"):
            mode = stat.S_IMODE(os.stat(f"{queue_path}{suffix}").st_mode)
            assert mode == 0o600, (suffix, oct(mode))
        q.close()
    finally:
        os.umask(old)


def test_existing_world_readable_file_is_tightened(queue_path: Path) -> None:
    DurableQueue(queue_path).close()
    os.chmod(queue_path, 0o644)
    DurableQueue(queue_path).close()
    assert stat.S_IMODE(os.stat(queue_path).st_mode) == 0o600


def test_schema_as_seen_by_sqlite_utils(queue: DurableQueue) -> None:
    queue.put("a", msg("x"))
    db = sqlite_utils.Database(queue.path)
    assert {"messages", "dead_letters", "leases", "counters"} <= set(db.table_names())
    index_columns = [ix.columns for ix in db.table("messages").indexes]
    assert ["destination", "id"] in index_columns
    assert db["messages"].count == 1
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_exported_members() -> None:
    for name in durable_queue.__all__:
        member = getattr(durable_queue, name)
        assert member.__module__.startswith("durable_queue."), name
    assert {"DurableQueue", "Replayer", "StoredMessage", "QueueStats"} <= set(durable_queue.__all__)


def test_imports_no_azure_and_no_gateway() -> None:
    code = (
        "import sys, durable_queue; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('azure', 'gateway')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_counts_stay_exact_through_every_kind_of_removal(queue_path: Path) -> None:
    q = DurableQueue(queue_path, max_messages=5)
    q.put_many("a", [msg(f"a{i}") for i in range(3)])
    q.put_many("b", [msg(f"b{i}") for i in range(2)])
    q.ack(q.get_batch("a", 1))
    q.dead_letter(q.get_batch("b", 1)[0], "bad")
    assert len(q) == 3 and q.stats().count == 3
    q.purge("a")
    assert len(q) == 1
    # the freed room is usable, and no more than that
    q.put_many("c", [msg(f"c{i}") for i in range(4)])
    with pytest.raises(QueueFull):
        q.put("c", msg("c4"))
    # the cap also guards requeue
    with pytest.raises(QueueFull):
        q.requeue_dead_letters()
    assert len(q.dead_letters()) == 1
    q.close()


def test_records_rebuilt_from_rows_equal_the_originals(queue: DurableQueue) -> None:
    from durable_queue import _rows

    assert _rows.FAST, "Message or StoredMessage changed shape: revisit _rows"
    original = Message(body=b"x", message_id="id", partition_key="k", properties={"a": 1.5})
    queue.put("a", original)
    queue.put("a", Message(body=b"y", message_id="plain"))
    with_props, plain = queue.get_batch("a")
    assert with_props.message == original and hash(with_props.message) == hash(original)
    with pytest.raises(TypeError):
        with_props.message.properties["a"] = 2  # type: ignore[index]
    assert plain.message == Message(body=b"y", message_id="plain")
    assert plain.message.properties == {} and plain.message.size == len(b"y") + len("plain")
    with pytest.raises(AttributeError):
        plain.attempts = 3  # type: ignore[misc]


def test_ids_stay_unique_across_handles_through_removals(queue_path: Path) -> None:
    # Given two handles on one file, each with a cached view of the ids
    first = DurableQueue(queue_path)
    second = DurableQueue(queue_path)
    a = first.put("d", msg("a"))
    # When the other handle puts and removes above that view
    b = second.put("d", msg("b"))
    second.ack([b])
    # Then the first handle neither reuses the removed id nor loses count
    c = first.put("d", msg("c"))
    d = second.put("d", msg("d"))
    assert a < b < c < d
    assert ids_of(first.peek("d")) == ["a", "c", "d"]
    assert len(first) == len(second) == 3
    first.close()
    second.close()


# -- bindings: whose messages a destination holds ------------------------------------


def test_bind_records_an_owner_and_refuses_another_while_messages_wait(
    queue: DurableQueue,
) -> None:
    assert queue.binding("*/orders") is None
    assert queue.bind("*/orders", "local:///a/primary.db orders") is None
    assert queue.bind("*/orders", "local:///a/primary.db orders") == (
        "local:///a/primary.db orders")
    queue.put("*/orders", msg("m1"))
    with pytest.raises(ConfigError) as caught:
        queue.bind("*/orders", "local:///b/primary.db orders")
    text = str(caught.value)
    assert "local:///a/primary.db" in text and "local:///b/primary.db" in text
    assert str(queue.path) in text and "\n" not in text
    assert queue.binding("*/orders") == "local:///a/primary.db orders"
    # Once drained, the destination may be taken by another owner
    queue.purge()
    queue.bind("*/orders", "local:///b/primary.db orders")
    assert queue.binding("*/orders") == "local:///b/primary.db orders"


def test_a_file_without_bindings_opens_untouched_and_gets_them_on_first_bind(
    queue_path: Path,
) -> None:
    # Given a queue file of the earlier layout (no bindings table), with a message
    with DurableQueue(queue_path) as q:
        q.put("*/orders", msg("m1"))
    conn = sqlite3.connect(queue_path)
    conn.execute("DROP TABLE bindings")
    conn.commit()
    conn.close()
    # When it is opened and read, Then it reads as "no owner recorded"
    with DurableQueue(queue_path) as q:
        assert q.binding("*/orders") is None
        assert [m.message.message_id for m in q.peek()] == ["m1"]
        # And the first bind records one
        assert q.bind("*/orders", "owner") is None
        assert q.binding("*/orders") == "owner"
