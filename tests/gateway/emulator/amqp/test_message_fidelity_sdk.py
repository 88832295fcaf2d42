"""Messages as Service Bus makes them, checked with the unmodified azure-servicebus SDK.

Bodies of every kind (data, amqp-value, amqp-sequence, none) come back as sent;
sequence numbers count per entity from 1; a locked delivery carries its lock token in
its delivery annotations; a deferred message says so; a session filter that is not a
string is refused.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusReceiveMode
from azure.servicebus._pyamqp import _encode as sdk_encode
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from azure.servicebus.exceptions import ServiceBusError

from gateway.amqp import decode_message
from gateway.amqp._types import Decimal128
from gateway.emulator import Emulator, QueueSpec
from gateway.transports.local._store import Store

pytestmark = pytest.mark.anyio

QUEUE = "orders"
OTHER = "invoices"
SESSIONS = "workflows"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    emu = Emulator({"primary": 0}, data_dir=tmp_path / "data", queues=[
        QUEUE, OTHER, QueueSpec(name=SESSIONS, requires_session=True)])
    async with emu:
        yield emu


@pytest.fixture
def conn_str(emulator: Emulator) -> str:
    return emulator.connection_string("primary")


def client(conn_str: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0)


def as_read(value: object) -> object:
    """``value`` as the SDK's decoder gives it back: AMQP strings come back as bytes."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [as_read(v) for v in value]
    if isinstance(value, dict):
        return {as_read(k): as_read(v) for k, v in value.items()}
    return value


async def send(conn_str: str, queue: str, *messages: object) -> None:
    async with client(conn_str) as c, c.get_queue_sender(queue, keep_alive=None) as sender:
        await sender.send_messages(list(messages))  # type: ignore[arg-type]


async def test_a_locked_delivery_carries_its_lock_token_in_delivery_annotations(
        conn_str: str) -> None:
    # Given a message in the queue
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(data_body=b"x"))
    # When it is received in peek-lock mode
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        [got] = await r.receive_messages(max_wait_time=2)
        # Then its delivery annotations hold the lock token, as the service sends them
        annotations = got.raw_amqp_message.delivery_annotations
        assert annotations is not None
        assert uuid.UUID(str(annotations[b"x-opt-lock-token"])) == got.lock_token
        await r.complete_message(got)


async def test_a_message_sent_without_a_body_comes_back_without_one(conn_str: str) -> None:
    # Given a message sent with no body (the SDK then writes no body section at all)
    await send(conn_str, QUEUE, ServiceBusMessage(None, message_id="empty"))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is peeked and received
        [peeked] = await r.peek_messages()
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then neither shows a body (an empty data section would read as a data body)
    for m in (peeked, got):
        assert m.message_id == "empty"
        assert (m.body_type, m.body) == (AmqpMessageBodyType.VALUE, None)


@pytest.mark.parametrize("body", [
    {"a": 1, "b": [1.5, "x", None], "c": {b"k": True}}, 42, "text", b"bytes", [1, 2]])
async def test_an_amqp_value_body_round_trips(conn_str: str, body: object) -> None:
    # Given a message whose body is one amqp-value
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(value_body=body))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is peeked and received
        [peeked] = await r.peek_messages()
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then both carry the same value body
    for m in (peeked, got):
        assert m.body_type == AmqpMessageBodyType.VALUE
        assert m.body == as_read(body)


async def test_an_amqp_sequence_body_round_trips(conn_str: str) -> None:
    # Given a message whose body is two amqp-sequence sections
    body = [[1, "two", 3.5], [b"four", None, {"five": 5}]]
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(sequence_body=body))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is peeked and received
        [peeked] = await r.peek_messages()
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then both carry the same sequence sections
    for m in (peeked, got):
        assert m.body_type == AmqpMessageBodyType.SEQUENCE
        assert list(m.body) == as_read(body)


async def test_a_deferred_message_received_by_sequence_number_says_it_is_deferred(
        conn_str: str) -> None:
    # Given a deferred message
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(data_body=b"later"))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        [first] = await r.receive_messages(max_wait_time=2)
        await r.defer_message(first)
        seq = first.sequence_number or 0
        # When it is peeked, and received by its sequence number
        [peeked] = await r.peek_messages(sequence_number=seq)
        [again] = await r.receive_deferred_messages([seq])
        # Then both report it deferred (x-opt-message-state 1), as the service does
        assert peeked.state == ServiceBusMessageState.DEFERRED
        assert again.state == ServiceBusMessageState.DEFERRED
        await r.complete_message(again)


async def test_a_session_filter_that_is_not_a_string_is_refused(conn_str: str) -> None:
    # Given a session-enabled queue with a message in session "1"
    await send(conn_str, SESSIONS, AmqpAnnotatedMessage(
        data_body=b"x", properties={"group_id": "1"}))
    # When a receiver asks for session 1, an int
    async with client(conn_str) as c:
        receiver = c.get_queue_receiver(SESSIONS, session_id=1)  # type: ignore[arg-type]
        # Then it is refused as an argument error, which the SDK raises as ServiceBusError
        with pytest.raises(ServiceBusError, match="session"):
            async with receiver:
                await receiver.receive_messages(max_wait_time=1)


async def test_sequence_numbers_count_per_queue_from_one(conn_str: str) -> None:
    # Given messages sent to one queue, then to another
    await send(conn_str, QUEUE, *[AmqpAnnotatedMessage(data_body=b"a")] * 3)
    await send(conn_str, OTHER, *[AmqpAnnotatedMessage(data_body=b"b")] * 2)
    async with client(conn_str) as c:
        # When each queue is peeked from sequence number 1, and one received and deleted
        async with c.get_queue_receiver(QUEUE) as r:
            first = await r.peek_messages(max_message_count=10, sequence_number=1)
        async with c.get_queue_receiver(
                OTHER, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            second = await r.receive_messages(max_message_count=10, max_wait_time=2)
    # Then each queue numbered its own messages from 1
    assert [m.sequence_number for m in first] == [1, 2, 3]
    assert [m.sequence_number for m in second] == [1, 2]


#: Every AMQP type the SDK writes: as Python values (its encoder picks the type) and as
#: its typed values ({TYPE: ..., VALUE: ...}); what its decoder gives back for each.
#: (Its encoder writes a plain int as an AMQP int, refusing one beyond 32 bits, and
#: fails on binary application properties that are not UTF-8; decimal128 is below.)
EVERY_TYPE: dict[str, tuple[object, object]] = {
    "null": (None, None),
    "boolean": (True, True),
    "ubyte": ({TYPE: AMQPTypes.ubyte, VALUE: 200}, 200),
    "byte": ({TYPE: AMQPTypes.byte, VALUE: -100}, -100),
    "ushort": ({TYPE: AMQPTypes.ushort, VALUE: 60000}, 60000),
    "short": ({TYPE: AMQPTypes.short, VALUE: -30000}, -30000),
    "uint": ({TYPE: AMQPTypes.uint, VALUE: 4_000_000_000}, 4_000_000_000),
    "int": (-7, -7),
    "ulong": ({TYPE: AMQPTypes.ulong, VALUE: 2**64 - 1}, 2**64 - 1),
    "long": ({TYPE: AMQPTypes.long, VALUE: -(2**40)}, -(2**40)),
    "float": ({TYPE: AMQPTypes.float, VALUE: 1.5}, 1.5),
    "double": (0.1, 0.1),
    "timestamp": (datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, datetime.timezone.utc),
                  1714979289123),
    "uuid": (uuid.UUID(int=7), uuid.UUID(int=7)),
    "binary": (b"\x00\x01", b"\x00\x01"),
    "string": ("hé", "hé".encode()),
    "symbol": ({TYPE: AMQPTypes.symbol, VALUE: "sym"}, b"sym"),
    "list": ([1, "a", None], [1, b"a", None]),
    "map": ({"k": [True]}, {b"k": [True]}),
    "array": ({TYPE: AMQPTypes.array, VALUE: [{TYPE: AMQPTypes.int, VALUE: 1},
                                              {TYPE: AMQPTypes.int, VALUE: 2}]}, [1, 2]),
}


async def test_application_properties_of_every_amqp_type_round_trip(conn_str: str) -> None:
    # Given a message with an application property of each AMQP type
    sent = {name: value for name, (value, _) in EVERY_TYPE.items()}
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(data_body=b"x",
                                                     application_properties=sent))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is peeked and received
        [peeked] = await r.peek_messages()
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then each property comes back as the SDK reads what it sent
    for m in (peeked, got):
        props = m.application_properties or {}
        assert {k.decode(): v for k, v in props.items()} == {
            name: read for name, (_, read) in EVERY_TYPE.items()}


async def test_message_annotations_of_every_amqp_type_round_trip(conn_str: str) -> None:
    # Given a message with a message annotation of each AMQP type (the emulator decodes
    # and encodes them again to add its own)
    sent = {f"x-{name}": value for name, (value, _) in EVERY_TYPE.items()}
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(data_body=b"x", annotations=sent))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is peeked and received
        [peeked] = await r.peek_messages()
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then each annotation comes back as the SDK reads what it sent
    for m in (peeked, got):
        annotations = m.raw_amqp_message.annotations or {}
        assert {k.decode(): v for k, v in annotations.items() if k.startswith(b"x-") and
                not k.startswith(b"x-opt-")} == {
            f"x-{name}": read for name, (_, read) in EVERY_TYPE.items()}


@pytest.mark.parametrize("name", sorted(
    name for name, (value, _) in EVERY_TYPE.items()
    if value is not None and not (isinstance(value, dict) and TYPE in value)))
async def test_a_value_body_of_every_amqp_type_round_trips(conn_str: str, name: str) -> None:
    # Given a message whose amqp-value body is of one AMQP type the SDK writes there (it
    # writes a value body untyped, and none at all for null)
    value, read = EVERY_TYPE[name]
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(value_body=value))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # When it is received
        [got] = await r.receive_messages(max_wait_time=2)
        await r.complete_message(got)
    # Then the body is as the SDK reads what it sent
    assert got.body == read


async def test_a_decimal_application_property_and_body_are_kept_as_the_sdk_wrote_them(
        conn_str: str, tmp_path: Path) -> None:
    # Given a message with a Decimal application property and a Decimal value body
    # (azure-servicebus writes decimal128 octets that its own decoder refuses, so no
    # SDK receiver can read it back, from the service or the emulator)
    amount = Decimal("-12.345")
    await send(conn_str, QUEUE, AmqpAnnotatedMessage(
        value_body=amount, application_properties={"amount": amount}))
    # When the message kept in the queue is read with the emulator's codec
    store = Store(str(tmp_path / "data" / "primary.db"), namespace="primary",
                  auto_create=False)
    [(_, sections)] = store.peek_sections(QUEUE, from_sequence=1, max_messages=1)
    store.close()
    assert sections is not None
    kept = decode_message(sections)
    # Then both hold the octets the SDK wrote, unchanged
    buf = bytearray()
    sdk_encode.encode_value(buf, amount)
    assert kept.application_properties == {"amount": Decimal128(bytes(buf[1:]))}
    assert kept.value == Decimal128(bytes(buf[1:]))
