"""Queues of the local namespace: peek-lock, settlement, redelivery, dead letters."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from gateway.transports import (
    EntityKind,
    LocalNamespace,
    LocalTransport,
    ReceiveMode,
)
from gateway.transports.local._store import Queued, Store
from replication import ConfigError, Message, MessageRejected
from tests.conftest import FakeClock

pytestmark = pytest.mark.anyio

DLQ = "orders/$DeadLetterQueue"


async def test_send_receive_complete(namespace: LocalNamespace, transport: LocalTransport,
                                     clock: FakeClock) -> None:
    # Given a queue with two messages
    namespace.create_queue("orders", lock_duration=30)
    sent = [Message(b"one", properties={"n": 1, "ok": True}), Message(b"two", partition_key="k")]
    await transport.send("orders", sent)

    # When they are received and completed
    got = await transport.receive("orders", max_messages=10)
    for r in got:
        await transport.complete(r)

    # Then they came in order, with their metadata, and the queue is empty
    assert [r.message for r in got] == sent
    assert [r.body for r in got] == [b"one", b"two"]
    assert dict(got[0].message.properties) == {"n": 1, "ok": True}
    assert got[1].message.partition_key == "k"
    assert all(r.delivery_count == 1 and r.namespace == "primary" for r in got)
    assert got[0].sequence_number < got[1].sequence_number
    assert got[0].enqueued_time == clock.now
    assert got[0].locked_until == clock.now + 30
    assert got[0].lock_token and got[0].lock_token != got[1].lock_token
    assert await transport.receive("orders") == []
    [info] = namespace.entities()
    assert (info.name, info.kind, info.active_count) == ("orders", EntityKind.QUEUE, 0)


async def test_locked_message_is_not_delivered_twice(transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"a")])
    assert len(await transport.receive("orders")) == 1
    assert await transport.receive("orders") == []


async def test_abandon_redelivers_with_higher_delivery_count(transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"a", message_id="m1")])
    [first] = await transport.receive("orders")
    await transport.abandon(first)
    [second] = await transport.receive("orders")
    assert (second.message_id, second.delivery_count) == ("m1", 2)
    assert second.lock_token != first.lock_token


async def test_expired_lock_redelivers_and_old_lock_is_lost(
    namespace: LocalNamespace, transport: LocalTransport, clock: FakeClock
) -> None:
    # Given a message received with a 10 s lock
    namespace.create_queue("orders", lock_duration=10)
    await transport.send("orders", [Message(b"a", message_id="m1")])
    [first] = await transport.receive("orders")
    clock.advance(9.9)
    assert await transport.receive("orders") == []

    # When the lock expires
    clock.advance(0.2)
    [second] = await transport.receive("orders")

    # Then it is delivered again, and settling the first delivery fails for good
    assert (second.message_id, second.delivery_count) == ("m1", 2)
    with pytest.raises(MessageRejected, match="lock lost"):
        await transport.complete(first)
    await transport.complete(second)
    assert namespace.entities()[0].active_count == 0


async def test_real_clock_lock_expiry(tmp_path: Path) -> None:
    LocalNamespace("primary", data_dir=tmp_path).create_queue("orders", lock_duration=0.2)
    async with LocalTransport("primary", data_dir=tmp_path) as t:
        await t.send("orders", [Message(b"a")])
        [_first] = await t.receive("orders")
        start = time.monotonic()
        [second] = await t.receive("orders", max_wait=5)
        assert 0.1 < time.monotonic() - start < 2
        assert second.delivery_count == 2


async def test_settled_message_cannot_be_settled_again(transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"a")])
    [r] = await transport.receive("orders")
    await transport.complete(r)
    for settle in (transport.complete, transport.abandon):
        with pytest.raises(MessageRejected, match="lock lost"):
            await settle(r)


async def test_max_delivery_count_dead_letters_on_abandon(
    namespace: LocalNamespace, transport: LocalTransport
) -> None:
    namespace.create_queue("orders", max_delivery_count=2)
    await transport.send("orders", [Message(b"a", message_id="m1", properties={"x": "y"})])
    for _ in range(2):
        [r] = await transport.receive("orders")
        await transport.abandon(r)
    assert await transport.receive("orders") == []

    [dead] = await transport.receive(DLQ)
    assert dead.message_id == "m1" and dead.entity == DLQ
    assert dead.message.properties["DeadLetterReason"] == "MaxDeliveryCountExceeded"
    assert dead.message.properties["x"] == "y"
    info = namespace.entities()[0]
    assert (info.active_count, info.dead_letter_count) == (0, 1)


async def test_max_delivery_count_dead_letters_on_lock_expiry(
    namespace: LocalNamespace, transport: LocalTransport, clock: FakeClock
) -> None:
    namespace.create_queue("orders", lock_duration=1, max_delivery_count=3)
    await transport.send("orders", [Message(b"a", message_id="m1")])
    counts: list[int] = []
    for _ in range(4):
        counts.extend(r.delivery_count for r in await transport.receive("orders"))
        clock.advance(2)
    assert counts == [1, 2, 3]
    [dead] = await transport.receive(DLQ)
    assert dead.message.properties["DeadLetterReason"] == "MaxDeliveryCountExceeded"
    # The dead-letter sub-queue does not dead-letter again, and it can be drained.
    await transport.complete(dead)
    assert namespace.entities()[0].dead_letter_count == 0


async def test_explicit_dead_letter_with_reason(transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"a", message_id="m1")])
    [r] = await transport.receive("orders")
    await transport.dead_letter(r, reason="BadFormat", description="no header")
    assert await transport.receive("orders") == []
    [dead] = await transport.receive(DLQ)
    assert dead.message_id == "m1"
    assert dead.message.properties["DeadLetterReason"] == "BadFormat"
    assert dead.message.properties["DeadLetterErrorDescription"] == "no header"
    with pytest.raises(MessageRejected, match="dead-lettered already"):
        await transport.dead_letter(dead, reason="again")


async def test_receive_and_delete(namespace: LocalNamespace, transport: LocalTransport) -> None:
    await transport.send("orders", [Message(b"a"), Message(b"b")])
    got = await transport.receive("orders", max_messages=5, mode=ReceiveMode.RECEIVE_AND_DELETE)
    assert [r.body for r in got] == [b"a", b"b"]
    assert all(r.lock_token is None and r.locked_until is None for r in got)
    assert namespace.entities()[0].active_count == 0
    with pytest.raises(MessageRejected, match="no lock"):
        await transport.complete(got[0])


async def test_receive_waits_for_a_message(transport: LocalTransport, tmp_path: Path) -> None:
    import anyio

    async def send_later() -> None:
        await anyio.sleep(0.2)
        async with LocalTransport("primary", data_dir=tmp_path) as other:
            await other.send("orders", [Message(b"late")])

    assert await transport.receive("orders") == []  # creates the queue
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_later)
        start = time.monotonic()
        got = await transport.receive("orders", max_wait=5)
    assert [r.body for r in got] == [b"late"]
    assert time.monotonic() - start < 2


async def test_empty_receive_waits_max_wait(transport: LocalTransport) -> None:
    start = time.monotonic()
    assert await transport.receive("orders", max_wait=0.3) == []
    assert 0.25 < time.monotonic() - start < 2


async def test_oversized_message_is_rejected_and_nothing_is_sent(
    namespace: LocalNamespace, transport: LocalTransport
) -> None:
    namespace.create_queue("orders", max_message_size=100)
    big = Message(b"x" * 200)
    with pytest.raises(MessageRejected, match=r"\d+ bytes, over the 100-byte limit") as info:
        await transport.send("orders", [Message(b"small"), big])
    assert "\n" not in str(info.value)
    assert await transport.receive("orders") == []


async def test_unknown_entity_without_auto_create(tmp_path: Path) -> None:
    async with LocalTransport("primary", data_dir=tmp_path, auto_create=False) as t:
        with pytest.raises(MessageRejected, match="no such entity 'nope'"):
            await t.send("nope", [Message(b"a")])
        with pytest.raises(MessageRejected, match="no such entity"):
            await t.receive("nope")
    assert LocalNamespace("primary", data_dir=tmp_path).entities() == []


async def test_auto_create_makes_a_queue(namespace: LocalNamespace,
                                         transport: LocalTransport) -> None:
    assert await transport.receive("fresh") == []
    [info] = namespace.entities()
    assert (info.name, info.kind, info.max_delivery_count) == ("fresh", EntityKind.QUEUE, 10)


async def test_queue_operations_on_wrong_entities(namespace: LocalNamespace,
                                                  transport: LocalTransport) -> None:
    namespace.create_partitioned("hub")
    with pytest.raises(MessageRejected, match="partitioned"):
        await transport.receive("hub")
    with pytest.raises(MessageRejected, match="dead-letter"):
        await transport.send(DLQ, [Message(b"a")])
    with pytest.raises(ConfigError):
        await transport.receive("orders", max_messages=0)


def test_create_is_idempotent_and_rejects_other_settings(namespace: LocalNamespace) -> None:
    namespace.create_queue("orders", lock_duration=5)
    namespace.create_queue("orders", lock_duration=5)
    with pytest.raises(ConfigError, match="other settings"):
        namespace.create_queue("orders", lock_duration=6)
    with pytest.raises(ConfigError, match="other settings"):
        namespace.create_partitioned("orders")
    with pytest.raises(ConfigError):
        namespace.create_queue("bad", lock_duration=0)
    with pytest.raises(ConfigError):
        namespace.create_queue("x/$DeadLetterQueue")
    assert [e.name for e in namespace.entities()] == ["orders"]


# -- what the emulator keeps of AMQP messages: sections, schedule, time to live ----------


def _store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "primary.db"), namespace="primary", auto_create=True)


def test_sections_and_schedule_are_kept_beside_the_message(tmp_path: Path) -> None:
    store = _store(tmp_path)
    # Given a message with AMQP sections, and one scheduled 10 s ahead
    now = 1000.0
    store.send("orders", [Queued(message=Message(b"now", message_id="a"), sections=b"\x00S"),
                          Queued(message=Message(b"later", message_id="b"),
                                 scheduled_time=now + 10)], now)
    # When the queue is received before, then after the scheduled time
    before = store.receive_sections("orders", max_messages=10, mode=ReceiveMode.PEEK_LOCK,
                                    now=now + 1)
    after = store.receive("orders", max_messages=10, mode=ReceiveMode.PEEK_LOCK, now=now + 10)
    # Then the first comes with its sections, the second only once due, enqueued then
    assert [(r.message_id, sections) for r, sections in before] == [("a", b"\x00S")]
    assert [(r.message_id, r.enqueued_time) for r in after] == [("b", now + 10)]
    # and a peek shows a scheduled message before it is due
    store.send("orders", [Queued(message=Message(b"x", message_id="c"),
                                 scheduled_time=now + 100)], now)
    assert [r.message_id for r in store.peek("orders", from_sequence=0, max_messages=9)] == [
        "a", "b", "c"]
    store.close()


def test_cancel_scheduled_removes_only_messages_still_waiting(tmp_path: Path) -> None:
    store = _store(tmp_path)
    now = 1000.0
    due, waiting = store.schedule("orders", [
        Queued(message=Message(b"due", message_id="due"), scheduled_time=now + 1),
        Queued(message=Message(b"waiting", message_id="waiting"), scheduled_time=now + 60)], now)
    # A cancel naming an enqueued (due) message changes nothing and names it
    assert store.cancel_scheduled("orders", [due, waiting], now + 2) == [due]
    assert store.cancel_scheduled("orders", [waiting], now + 2) == []
    got = store.receive("orders", max_messages=10, mode=ReceiveMode.PEEK_LOCK, now=now + 100)
    assert [r.message_id for r in got] == ["due"]
    store.close()


@pytest.mark.parametrize("dead_letters", [False, True])
def test_an_expired_message_is_never_delivered(tmp_path: Path, dead_letters: bool) -> None:
    # Given a queue (dead-lettering on expiration or not) and a message living 5 s
    LocalNamespace("primary", data_dir=tmp_path).create_queue(
        "orders", dead_lettering_on_message_expiration=dead_letters)
    store = _store(tmp_path)
    now = 1000.0
    store.send("orders", [Queued(message=Message(b"old", message_id="old"), time_to_live=5),
                          Message(b"kept", message_id="kept")], now)
    # When it is received after its time to live
    got = store.receive("orders", max_messages=10, mode=ReceiveMode.PEEK_LOCK, now=now + 6)
    # Then only the other message comes; the expired one is a dead letter or gone
    assert [r.message_id for r in got] == ["kept"]
    dead = store.receive(DLQ, max_messages=10, mode=ReceiveMode.PEEK_LOCK, now=now + 600)
    if dead_letters:
        [letter] = dead
        assert letter.message_id == "old"
        assert letter.message.properties["DeadLetterReason"] == "TTLExpiredException"
    else:
        assert dead == []
    store.close()


def test_a_file_from_before_the_new_columns_is_upgraded_in_place(tmp_path: Path) -> None:
    # Given a namespace file written with the first schema (no sections, no schedule)
    path = tmp_path / "primary.db"
    conn = sqlite3.connect(path)
    conn.executescript(_FIRST_SCHEMA)
    conn.execute("INSERT INTO entities VALUES ('orders', 'queue', 0, 30.0, 10, 1048576)")
    conn.execute("INSERT INTO messages (entity, message_id, body, properties, enqueued_time) "
                 "VALUES ('orders', 'old', x'6f6c64', '{\"n\": 1}', 1.0)")
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    # When the namespace opens it
    namespace = LocalNamespace("primary", data_dir=tmp_path)
    [info] = namespace.entities()
    namespace.create_queue("orders")  # the same settings as before: accepted
    store = _store(tmp_path)
    [(old, sections)] = store.receive_sections("orders", max_messages=5,
                                               mode=ReceiveMode.PEEK_LOCK, now=2.0)
    # Then its messages and settings are intact
    assert (old.message_id, old.body, dict(old.message.properties), sections) == (
        "old", b"old", {"n": 1}, None)
    assert not info.dead_lettering_on_message_expiration and not info.requires_session
    assert old.message.session_id is None
    store.close()
    namespace.close()


def test_each_queue_numbers_its_messages_from_one(tmp_path: Path) -> None:
    # Given two queues of one namespace
    store = _store(tmp_path)
    # When messages are sent to one, then the other, then the first again
    store.send("orders", [Message(b"a"), Message(b"b")], 1.0)
    store.send("invoices", [Message(b"c")], 1.0)
    store.send("orders", [Message(b"d")], 1.0)
    got = store.receive("orders", max_messages=10, mode=ReceiveMode.PEEK_LOCK, now=2.0)
    # Then each counts from 1, as Service Bus does, and a dead letter keeps its number
    assert [r.sequence_number for r in got] == [1, 2, 3]
    assert [r.sequence_number for r in store.peek("invoices", from_sequence=1,
                                                  max_messages=5)] == [1]
    store.settle(got[1], "dead_letter", 2.0)
    assert [r.sequence_number for r in store.peek(DLQ, from_sequence=0, max_messages=5)] == [2]
    store.close()


def test_a_file_that_numbered_messages_across_the_namespace_counts_on_above_them(
        tmp_path: Path) -> None:
    # Given a schema 4 file, whose sequence numbers counted across its queues
    store = _store(tmp_path)
    store.send("invoices", [Message(b"x", message_id="x")] * 5, 1.0)
    store.send("orders", [Message(b"old", message_id="old")], 1.0)
    store.close()
    with sqlite3.connect(tmp_path / "primary.db") as conn:
        conn.execute("UPDATE messages SET number = NULL")
        conn.execute("DROP TABLE sequences")
        conn.execute("UPDATE sqlite_sequence SET seq = 6 WHERE name = 'messages'")
        conn.execute("UPDATE messages SET seq = 6 WHERE message_id = 'old'")
        conn.execute("PRAGMA user_version=4")
    conn.close()
    # When it is opened again and the queue takes a new message
    store = _store(tmp_path)
    store.send("orders", [Message(b"new", message_id="new")], 2.0)
    store.send("fresh", [Message(b"f", message_id="f")], 2.0)
    # Then the old message keeps its number, the new one counts on above it, and a new
    # queue starts at 1
    peeked = store.peek("orders", from_sequence=1, max_messages=5)
    assert [(r.message_id, r.sequence_number) for r in peeked] == [("old", 6), ("new", 7)]
    assert [r.sequence_number for r in store.peek("fresh", from_sequence=1,
                                                  max_messages=5)] == [1]
    store.close()


_FIRST_SCHEMA = """
CREATE TABLE entities (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, partitions INTEGER NOT NULL,
    lock_duration REAL NOT NULL, max_delivery_count INTEGER NOT NULL,
    max_message_size INTEGER NOT NULL);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, entity TEXT NOT NULL,
    message_id TEXT NOT NULL, body BLOB NOT NULL, partition_key TEXT,
    properties TEXT, enqueued_time REAL NOT NULL,
    delivery_count INTEGER NOT NULL DEFAULT 0, lock_token TEXT, locked_until REAL);
CREATE INDEX messages_by_entity ON messages (entity, seq);
CREATE UNIQUE INDEX messages_by_lock ON messages (lock_token);
CREATE TABLE partitions (
    entity TEXT NOT NULL, partition INTEGER NOT NULL, next_seq INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, PRIMARY KEY (entity, partition));
CREATE TABLE events (
    entity TEXT NOT NULL, partition INTEGER NOT NULL, seq INTEGER NOT NULL,
    "offset" INTEGER NOT NULL, message_id TEXT NOT NULL, body BLOB NOT NULL,
    partition_key TEXT, properties TEXT, enqueued_time REAL NOT NULL,
    PRIMARY KEY (entity, partition, seq));
CREATE TABLE readers (
    entity TEXT NOT NULL, consumer_group TEXT NOT NULL, partition INTEGER NOT NULL,
    owner_level INTEGER NOT NULL, PRIMARY KEY (entity, consumer_group, partition));
"""


async def test_complete_many_completes_the_rest_and_names_each_lost_lock(
    namespace: LocalNamespace, transport: LocalTransport, tmp_path: Path
) -> None:
    # Given five received messages, one of them completed already, and one received
    # (and so removed) without a lock
    await transport.send("orders", [Message(b"x", message_id=f"m{i}") for i in range(5)])
    got = await transport.receive("orders", max_messages=4)
    await transport.complete(got[1])
    [unlocked] = await transport.receive("orders", mode=ReceiveMode.RECEIVE_AND_DELETE)

    # When the four, and the unlocked one, are completed together
    refusals = await transport.complete_many([*got, unlocked])

    # Then the others are completed, and each refusal is what complete() raises for it
    assert [r is None for r in refusals] == [True, False, True, True, False]
    assert isinstance(refusals[1], MessageRejected) and "lock lost" in str(refusals[1])
    assert isinstance(refusals[4], MessageRejected) and "holds no lock" in str(refusals[4])
    with pytest.raises(MessageRejected, match="lock lost"):
        await transport.complete(got[0])
    [info] = namespace.entities()
    assert info.active_count == 0
    assert await transport.complete_many([]) == []
