"""What the emulator keeps of a Service Bus message, and what it refuses, through the SDK.

Every AMQP property, the message annotations and application properties of every
type come back as sent; scheduled messages wait for their time; expired ones are
never delivered; messages over 256 KiB are refused as on a standard tier namespace.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.amqp import AmqpAnnotatedMessage
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    MessageSizeExceededError,
)

from gateway.emulator import Emulator, QueueSpec
from gateway.transports import LocalTransport
from tests.gateway.emulator.amqp.test_servicebus_sdk import client

pytestmark = pytest.mark.anyio

QUEUE = "orders"
EXPIRING = "expiring"  # dead-letters messages whose time to live is over
UTC = datetime.timezone.utc


@pytest.fixture
async def emulator(data_dir: Path) -> AsyncIterator[Emulator]:
    emu = Emulator({"primary": 0}, data_dir=data_dir, queues=[
        QUEUE, QueueSpec(name=EXPIRING, dead_lettering_on_message_expiration=True)])
    async with emu:
        yield emu


@pytest.fixture
def conn_str(emulator: Emulator) -> str:
    return emulator.connection_string("primary")


def _everything() -> ServiceBusMessage:
    return ServiceBusMessage(
        b"body", message_id="m-1", correlation_id="c-1", content_type="application/json",
        subject="subj", reply_to="replies", to="dest", session_id="s-1",
        reply_to_session_id="rs-1", partition_key="s-1",
        time_to_live=datetime.timedelta(hours=1),
        application_properties={
            "int": 7, "neg": -3, "float": 1.5, "bool": True, "str": "x",
            "bytes": b"\x00\x01", "when": datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, UTC),
            "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"), "none": None})


async def test_every_property_and_application_property_comes_back_as_sent(
        conn_str: str) -> None:
    # Given a message with every Service Bus property and application properties of each type
    sent = _everything()
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(sent)
        # When it is peeked, then received
        async with c.get_queue_receiver(QUEUE) as r:
            [peeked] = await r.peek_messages()
            [got] = await r.receive_messages(max_wait_time=2)
            await r.complete_message(got)
    # Then both carry every property as sent
    for m in (peeked, got):
        assert (str(m), m.message_id, m.correlation_id, m.content_type, m.subject) == (
            "body", "m-1", "c-1", "application/json", "subj")
        assert (m.reply_to, m.to, m.session_id, m.reply_to_session_id, m.partition_key) == (
            "replies", "dest", "s-1", "rs-1", "s-1")
        assert m.time_to_live == datetime.timedelta(hours=1)
        assert m.expires_at_utc is not None and m.enqueued_time_utc is not None
        assert m.expires_at_utc - m.enqueued_time_utc == datetime.timedelta(hours=1)
        # and every application property with its AMQP type
        props = m.application_properties
        assert props is not None
        assert {k: props[k] for k in (b"int", b"neg", b"float", b"bool", b"none")} == {
            b"int": 7, b"neg": -3, b"float": 1.5, b"bool": True, b"none": None}
        assert props[b"str"] in ("x", b"x")
        assert props[b"bytes"] == b"\x00\x01"
        assert props[b"uuid"] == uuid.UUID("12345678-1234-5678-1234-567812345678")
        # a datetime travels as an AMQP timestamp: the SDK reads its milliseconds
        assert props[b"when"] == int(datetime.datetime(
            2024, 5, 6, 7, 8, 9, 123000, UTC).timestamp() * 1000)
    raw = got.raw_amqp_message
    assert raw.properties is not None and raw.properties.creation_time is not None
    assert raw.properties.absolute_expiry_time is not None


async def test_every_amqp_property_and_annotation_of_a_raw_message_comes_back(
        conn_str: str) -> None:
    # Given an AMQP message with every property, its header and a custom annotation
    created = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    sent = AmqpAnnotatedMessage(
        data_body=[b"one", b"two"],
        header={"durable": True, "priority": 7},
        properties={"message_id": "raw-1", "user_id": b"me", "to": "to", "subject": "subj",
                    "reply_to": "rt", "correlation_id": "c", "content_type": "text/plain",
                    "content_encoding": "gzip", "creation_time": int(created.timestamp() * 1000),
                    "group_id": "g", "group_sequence": 5, "reply_to_group_id": "rg"},
        annotations={"x-custom": "yes", "x-number": 42},
        application_properties={"k": "v"},
    )
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(sent)
        async with c.get_queue_receiver(
                QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            [got] = await r.receive_messages(max_wait_time=2)
    raw = got.raw_amqp_message
    assert b"".join(raw.body) == b"onetwo"
    assert raw.header is not None and (raw.header.durable, raw.header.priority) == (True, 7)
    p = raw.properties
    assert p is not None
    assert (p.message_id, p.user_id, p.to, p.subject, p.reply_to, p.correlation_id) == (
        b"raw-1", b"me", b"to", b"subj", b"rt", b"c")
    assert (p.content_type, p.content_encoding, p.group_id, p.group_sequence,
            p.reply_to_group_id) == (b"text/plain", b"gzip", b"g", 5, b"rg")
    assert p.creation_time == int(created.timestamp() * 1000)
    assert raw.annotations is not None
    assert (raw.annotations[b"x-custom"], raw.annotations[b"x-number"]) == (b"yes", 42)
    assert raw.annotations[b"x-opt-sequence-number"] == got.sequence_number


async def test_local_readers_see_what_they_can_hold(conn_str: str, data_dir: Path) -> None:
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(_everything())
    async with LocalTransport("primary", data_dir=data_dir) as local:
        [got] = await local.receive(QUEUE, max_wait=1)
    assert (got.message_id, got.body, got.message.partition_key) == ("m-1", b"body", "s-1")
    assert got.message.properties["uuid"] == "12345678-1234-5678-1234-567812345678"
    assert got.message.properties["int"] == 7


async def test_a_dead_letter_keeps_its_properties_and_gets_the_reason(conn_str: str) -> None:
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(_everything())
        async with c.get_queue_receiver(QUEUE) as r:
            [m] = await r.receive_messages(max_wait_time=2)
            await r.dead_letter_message(m, reason="Bad", error_description="why")
        async with c.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as d:
            [dead] = await d.receive_messages(max_wait_time=2)
            await d.complete_message(dead)
    assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("Bad", "why")
    assert (dead.correlation_id, dead.session_id) == ("c-1", "s-1")
    assert dead.application_properties is not None
    assert dead.application_properties[b"uuid"] == uuid.UUID(
        "12345678-1234-5678-1234-567812345678")


async def test_scheduled_messages_wait_for_their_time_and_can_be_cancelled(
        conn_str: str) -> None:
    soon = datetime.datetime.now(UTC) + datetime.timedelta(seconds=4)
    later = datetime.datetime.now(UTC) + datetime.timedelta(hours=1)
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            # Given messages scheduled by the sender and by the message itself
            [first] = await sender.schedule_messages(ServiceBusMessage("soon", message_id="s"),
                                                     soon)
            [cancelled] = await sender.schedule_messages(
                ServiceBusMessage("never", message_id="n"), later)
            await sender.send_messages(ServiceBusMessage(
                "also soon", message_id="a", scheduled_enqueue_time_utc=soon))
            await sender.send_messages(ServiceBusMessage("now", message_id="now"))
            # When one is cancelled
            await sender.cancel_scheduled_messages(cancelled)
            # Then cancelling it again is refused
            with pytest.raises(MessageNotFoundError):
                await sender.cancel_scheduled_messages(cancelled)
        async with c.get_queue_receiver(QUEUE) as r:
            # and before their time only the plain message is delivered
            early = await r.receive_messages(max_message_count=10, max_wait_time=0.5)
            assert [m.message_id for m in early] == ["now"]
            await r.complete_message(early[0])
            # and a peek shows the scheduled ones, with their time
            peeked = await r.peek_messages(max_message_count=10, sequence_number=1)
            assert {m.message_id for m in peeked} == {"s", "a"}
            assert {m.state for m in peeked} == {ServiceBusMessageState.SCHEDULED}
            await asyncio.sleep(max(0.0, (soon - datetime.datetime.now(UTC)).total_seconds()))
            due: list[object] = []
            while len(due) < 2:
                got = await r.receive_messages(max_message_count=10, max_wait_time=2)
                assert got, "the scheduled messages did not come"
                for m in got:
                    await r.complete_message(m)
                due += got
    assert first is not None and first > 0
    assert sorted(m.message_id for m in due) == ["a", "s"]  # type: ignore[attr-defined]
    for m in due:
        assert m.scheduled_enqueue_time_utc is not None  # type: ignore[attr-defined]
        assert m.enqueued_time_utc >= soon - datetime.timedelta(seconds=0.01)  # type: ignore[attr-defined]


@pytest.mark.parametrize("queue", [QUEUE, EXPIRING])
async def test_an_expired_message_is_dropped_or_dead_lettered(conn_str: str, queue: str) -> None:
    async with client(conn_str) as c:
        async with c.get_queue_sender(queue, keep_alive=None) as sender:
            await sender.send_messages([
                # the SDK sends whole seconds
                ServiceBusMessage("brief", message_id="brief",
                                  time_to_live=datetime.timedelta(seconds=1)),
                ServiceBusMessage("lasting", message_id="lasting")])
        await asyncio.sleep(1.2)
        async with c.get_queue_receiver(
                queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            got = await r.receive_messages(max_message_count=10, max_wait_time=1)
        async with c.get_queue_receiver(
                queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as d:
            dead = await d.receive_messages(max_message_count=10, max_wait_time=0.5)
    assert [m.message_id for m in got] == ["lasting"]
    if queue == EXPIRING:
        assert [(m.message_id, m.dead_letter_reason) for m in dead] == [
            ("brief", "TTLExpiredException")]
    else:
        assert dead == []


async def test_messages_over_256_kib_are_refused_as_on_a_standard_namespace(
        conn_str: str) -> None:
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        # The SDK checks against the link's max-message-size before sending
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * 300_000))
        with pytest.raises(MessageSizeExceededError):
            await sender.schedule_messages(ServiceBusMessage(b"x" * 300_000),
                                           datetime.datetime.now(UTC))
        await sender.send_messages(ServiceBusMessage(b"x" * 200_000))


async def test_the_limit_is_configurable(data_dir: Path) -> None:
    emu = Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE], max_message_size=1 << 20)
    async with emu, client(emu.connection_string("primary")) as c, c.get_queue_sender(
            QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage(b"x" * 300_000))
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * 1_100_000))
