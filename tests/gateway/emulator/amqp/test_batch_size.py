"""The emulator measures a batch as the SDK that packed it does: a full SDK batch is taken.

azure-servicebus measures a ``ServiceBusMessageBatch`` without the envelope properties
it copies from the first message afterwards, so a batch packed full with long
MessageIds used to be refused; azure-eventhub measures its envelope too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventDataBatch
from azure.eventhub.aio import EventHubProducerClient
from azure.eventhub.exceptions import EventDataSendError
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError

from gateway.amqp._message import AmqpMessage
from gateway.emulator import Emulator, EventHubSpec
from gateway.emulator.amqp._servicebus import ENVELOPE_ALLOWANCE, batch_size
from gateway.transports import LocalNamespace

pytestmark = pytest.mark.anyio

QUEUE = "orders"
HUB = "small-hub"
HUB_LIMIT = 16 * 1024  # a small event hub limit keeps 128 full batches quick
SB_LIMIT = 256 * 1024
BODY = b"x" * 1024
# MessageId lengths (a MessageId is at most 128 characters): each near an encoding
# boundary of the id (str8), the batch's count, and the longest; a full 256 KB batch each
ID_LENGTHS = (1, 2, 3, 4, 5, 9, 10, 31, 32, 33, 63, 64, 65, 100, 127, 128)


def ids_of_length(n: int) -> Callable[[int], str]:
    """MessageIds of exactly ``n`` characters that differ per message, like ``r1-17``."""
    return lambda i: (f"r{n}-{i}-" + "." * n)[:n] if n > 3 else str(i % 10**n).zfill(n)


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    emu = Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE],
                   event_hubs=[EventHubSpec(name=HUB, partitions=1, max_message_size=HUB_LIMIT)])
    async with emu:
        yield emu


@pytest.fixture
async def sender(emulator: Emulator) -> AsyncIterator[ServiceBusSender]:
    client = ServiceBusClient.from_connection_string(
        emulator.connection_string("primary"), retry_total=0)
    async with client, client.get_queue_sender(QUEUE, keep_alive=None) as sender:
        yield sender


@pytest.fixture
async def producer(emulator: Emulator) -> AsyncIterator[EventHubProducerClient]:
    client = EventHubProducerClient.from_connection_string(
        emulator.connection_string("primary"), eventhub_name=HUB, retry_total=0)
    async with client:
        yield client


def fill(batch: ServiceBusMessageBatch, make_id: Callable[[int], str], start: int = 0) -> int:
    """Add 1 KiB messages until the SDK says the batch is full; how many it took."""
    i = start
    while True:
        try:
            batch.add_message(ServiceBusMessage(BODY, message_id=make_id(i)))
        except MessageSizeExceededError:
            return i - start
        i += 1


def counted(tmp_path: Path, entity: str) -> int:
    with LocalNamespace("primary", data_dir=tmp_path) as ns:
        return next(e.active_count for e in ns.entities() if e.name == entity)


async def test_service_bus_batches_packed_full_are_taken_with_ids_short_and_long(
        sender: ServiceBusSender, tmp_path: Path) -> None:
    sent = 0
    for n in ID_LENGTHS:
        # Given an SDK batch packed until add_message refuses, with ids of n characters
        batch = await sender.create_message_batch()
        assert batch.max_size_in_bytes == SB_LIMIT
        sent += fill(batch, ids_of_length(n))
        assert SB_LIMIT - batch.size_in_bytes < batch.size_in_bytes // len(batch)  # full
        # When it is sent through the SDK, Then the emulator takes it
        await sender.send_messages(batch)
    # (ids that grow with the count, as in r1-1 ... r1-999)
    batch = await sender.create_message_batch()
    sent += fill(batch, lambda i: f"r1-{i}", start=1)
    await sender.send_messages(batch)
    assert counted(tmp_path, QUEUE) == sent


def over_by(limit: int, excess: int, make: Callable[[int], ServiceBusMessage]
            ) -> ServiceBusMessageBatch:
    """A batch the SDK counts at exactly ``limit + excess`` bytes (``excess`` >= 0)."""
    batch = ServiceBusMessageBatch(max_size_in_bytes=limit + 100_000)
    i = 0
    while batch.size_in_bytes + 1100 <= limit:
        batch.add_message(make(i))
        i += 1
    want = limit + excess - batch.size_in_bytes
    # The last message's body is chosen so that the SDK's count lands on the target.
    for body in range(want, 0, -1):
        probe = ServiceBusMessageBatch(max_size_in_bytes=limit)
        probe.add_message(ServiceBusMessage(b"y" * body, message_id=f"last-{i}"))
        if probe.size_in_bytes == want:
            batch.add_message(ServiceBusMessage(b"y" * body, message_id=f"last-{i}"))
            break
    assert batch.size_in_bytes == limit + excess
    return batch


async def test_a_batch_over_the_limit_by_the_sdks_count_is_refused(
        sender: ServiceBusSender, tmp_path: Path) -> None:
    # Given two batches with a 128-character id on every message: one the SDK counts
    # at exactly the limit, one a byte over (built past the SDK's own check)
    def long_id(i: int) -> ServiceBusMessage:
        return ServiceBusMessage(BODY, message_id=f"{i:0128d}")

    at_limit, over = over_by(SB_LIMIT, 0, long_id), over_by(SB_LIMIT, 1, long_id)
    # Then the first is taken and the second refused, as too large
    await sender.send_messages(at_limit)
    with pytest.raises(MessageSizeExceededError):
        await sender.send_messages(over)
    assert counted(tmp_path, QUEUE) == len(at_limit)


async def test_event_hub_batches_packed_full_are_taken_with_ids_of_every_length(
        producer: EventHubProducerClient, tmp_path: Path) -> None:
    sent = 0
    for n in range(1, 129):
        # Given an EventDataBatch with a partition key packed until add refuses
        batch = await producer.create_batch(partition_key=f"key-{n}")
        assert batch.max_size_in_bytes == HUB_LIMIT
        make_id = ids_of_length(n)
        while True:
            event = EventData(BODY)
            event.message_id = make_id(len(batch))
            try:
                batch.add(event)
            except ValueError:
                break
        assert HUB_LIMIT - batch.size_in_bytes < batch.size_in_bytes // len(batch)  # full
        sent += len(batch)
        # When it is sent, Then the emulator takes it
        await producer.send_batch(batch)
    assert counted(tmp_path, HUB) == sent


async def test_an_event_hub_batch_over_the_limit_by_the_sdks_count_is_refused(
        producer: EventHubProducerClient, tmp_path: Path) -> None:
    # Given a batch the SDK counts one byte over the hub's limit
    batch = EventDataBatch(max_size_in_bytes=HUB_LIMIT * 2, partition_key="k")
    while batch.size_in_bytes + 1100 <= HUB_LIMIT:
        batch.add(EventData(BODY))
    want = HUB_LIMIT + 1 - batch.size_in_bytes
    body = next(b for b in range(want, 0, -1) if _event_size(b) == want)
    batch.add(EventData(b"y" * body))
    assert batch.size_in_bytes == HUB_LIMIT + 1
    # Then sending it is refused
    with pytest.raises(EventDataSendError, match="LinkMessageSizeExceeded"):
        await producer.send_batch(batch)
    assert counted(tmp_path, HUB) == 0


def _event_size(body: int) -> int:
    probe = EventDataBatch(max_size_in_bytes=HUB_LIMIT * 2, partition_key="k")
    empty = probe.size_in_bytes
    probe.add(EventData(b"y" * body))
    return probe.size_in_bytes - empty


def test_batch_size_counts_data_sections_and_only_a_large_envelope() -> None:
    # Given a batch envelope with data sections of 255 and 256 bytes
    batch = AmqpMessage(data=[b"a" * 255, b"b" * 256])
    sections = (255 + 5) + (256 + 8)
    # Then the envelope's own bytes are not counted, up to the allowance
    assert batch_size(sections, batch) == sections
    assert batch_size(sections + ENVELOPE_ALLOWANCE, batch) == sections
    assert batch_size(sections + ENVELOPE_ALLOWANCE + 7, batch) == sections + 7
