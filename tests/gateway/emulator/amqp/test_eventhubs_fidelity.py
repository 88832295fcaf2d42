"""Events as Event Hubs keeps them, checked with the unmodified azure-eventhub SDK: a
body of any kind (data, amqp-value, amqp-sequence, none) and the message's other
sections come back as sent, single and batched, with a partition key or id."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from azure.eventhub.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType

from gateway.transports import EventPosition, LocalTransport
from tests.gateway.emulator.amqp.test_eventhubs_sdk import producer, read
from tests.gateway.emulator.amqp.test_message_fidelity_sdk import as_read
from tests.gateway.emulator.conftest import HUB

pytestmark = pytest.mark.anyio

__all__ = ["producer"]  # the fixture, shared with the SDK tests


VALUE = {"a": 1, "b": [1.5, "x", None], "c": {b"k": True}}
SEQUENCE = [[1, "two", 3.5], [b"four", None, {"five": 5}]]


def kinds() -> list[Any]:
    """An event of each body kind, with properties and an application property."""
    made: list[Any] = [
        AmqpAnnotatedMessage(value_body=VALUE, application_properties={"kind": "value"},
                             properties={"content_type": "application/json",
                                         "correlation_id": "c-1"},
                             annotations={"x-origin": "test"}),
        AmqpAnnotatedMessage(sequence_body=SEQUENCE, application_properties={"kind": "seq"},
                             annotations={"x-origin": "test"}),
        AmqpAnnotatedMessage(value_body="text", application_properties={"kind": "text"},
                             annotations={"x-origin": "test"}),
    ]
    data = EventData(b"data")
    data.properties = {"kind": "data", "when": datetime.datetime(2026, 1, 2, 3, 4, 5,
                                                                 tzinfo=datetime.timezone.utc)}
    made.append(data)
    return made


def check(events: list[Any]) -> None:
    by_kind = {e.properties[b"kind"]: e for e in events}
    value = by_kind[b"value"].raw_amqp_message
    assert value.body_type == AmqpMessageBodyType.VALUE and value.body == as_read(VALUE)
    assert value.properties.content_type == b"application/json"
    assert value.properties.correlation_id == b"c-1"
    assert value.annotations[b"x-origin"] == b"test"  # message annotations are kept
    sequence = by_kind[b"seq"].raw_amqp_message
    assert sequence.body_type == AmqpMessageBodyType.SEQUENCE
    assert list(sequence.body) == as_read(SEQUENCE)
    assert by_kind[b"text"].raw_amqp_message.body == b"text"
    data = by_kind[b"data"]
    assert data.raw_amqp_message.body_type == AmqpMessageBodyType.DATA
    assert data.body_as_str() == "data"
    # a timestamp property (the SDK's decoder gives its milliseconds)
    assert data.properties[b"when"] == 1767323045000


async def test_every_body_kind_round_trips_in_a_batch_to_a_partition(
        conn_str: str, producer: EventHubProducerClient) -> None:
    # Given a batch to partition 0 with an event of each body kind
    batch = await producer.create_batch(partition_id="0")
    for event in kinds():
        batch.add(event)
    await producer.send_batch(batch)
    # When the partition is read, Then each comes back as it was sent
    got = await read(conn_str, "0", "-1", expect=4)
    assert len(got) == 4
    check(got)


async def test_every_body_kind_round_trips_sent_one_by_one_with_a_key(
        conn_str: str, data_dir: Path, producer: EventHubProducerClient) -> None:
    # Given each event sent on its own (a batch of one) with one partition key
    for event in kinds():
        batch = await producer.create_batch(partition_key="pk")
        batch.add(event)
        await producer.send_batch(batch)
    async with LocalTransport("primary", data_dir=data_dir) as local:
        found = [pid for pid in await local.get_partition_ids(HUB)
                 if await local.read_partition(HUB, pid, position=EventPosition.earliest())]
    # When their partition is read, Then they came back as sent, with the key
    [pid] = found
    got = await read(conn_str, pid, "-1", expect=4)
    assert len(got) == 4 and {e.partition_key for e in got} == {b"pk"}
    check(got)


async def test_an_event_sent_without_a_body_comes_back_without_one(
        conn_str: str, producer: EventHubProducerClient) -> None:
    # Given an event whose message has no body section at all
    batch = await producer.create_batch(partition_id="0")
    batch.add(AmqpAnnotatedMessage(value_body=None, application_properties={"k": "none"}))
    await producer.send_batch(batch)
    # When it is read, Then it shows no data body (an empty data section would)
    [got] = await read(conn_str, "0", "-1", expect=1)
    assert got.raw_amqp_message.body_type == AmqpMessageBodyType.VALUE
    assert got.raw_amqp_message.body is None
