"""AsyncGeoSender.send_batch over Service Bus (the SDK transport against the emulator):
big batches go through whatever their MessageIds, and a batch a namespace refuses for
size is sent again in halves, in order, so only a message too large on its own fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.aio import AsyncGeoSender
from gateway.amqp._message import decode_message
from gateway.emulator import Emulator
from gateway.emulator.amqp import _servicebus
from gateway.transports import LocalNamespace, LocalTransport, ReceiveMode
from gateway.transports.servicebus import ServiceBusTransport
from replication import (
    DeadlinePolicy,
    Message,
    MessageRejected,
    MessageTooLarge,
    ReplicationPolicy,
)

PATIENT = ReplicationPolicy(deadlines=DeadlinePolicy(initial=30.0, ceiling=30.0, per_mib=30.0))

pytestmark = pytest.mark.anyio

QUEUE = "orders"
NAMESPACES = ("primary", "secondary")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "namespaces"


@pytest.fixture
async def emulator(data_dir: Path) -> AsyncIterator[Emulator]:
    async with Emulator(dict.fromkeys(NAMESPACES, 0), data_dir=data_dir,
                        queues=[QUEUE]) as emu:
        yield emu


@pytest.fixture
async def make_sender(emulator: Emulator, data_dir: Path,
                      tmp_path: Path) -> AsyncIterator[Callable[[str], AsyncGeoSender]]:
    made: list[AsyncGeoSender] = []
    opened: list[ServiceBusTransport] = []

    def make(mode: str) -> AsyncGeoSender:
        def transport(name: str) -> ServiceBusTransport:
            opened.append(ServiceBusTransport.from_connection_string(
                emulator.connection_string(name), name=name, operation_timeout=30.0))
            return opened[-1]

        # These tests are about splitting, not deadlines: a loaded machine may take
        # more than the default first-answer deadline (and the SDK's own 2 s) to open a
        # connection and a link and take a 1 MiB batch, which would hedge (passive) or
        # buffer (active) instead.
        sender = AsyncGeoSender(primary=transport("primary"),
                                secondary=transport("secondary"), entity=QUEUE, mode=mode,
                                data_dir=data_dir, recovery=False,
                                state_dir=tmp_path / "state", policy=PATIENT)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        await sender.aclose()
    for t in opened:
        await t.aclose()


def kib_messages(n: int, make_id: Callable[[int], str]) -> list[Message]:
    return [Message(b"x" * 1024, message_id=make_id(i)) for i in range(n)]


async def queued_ids(data_dir: Path, namespace: str) -> list[str]:
    """The ids in the namespace's queue, in the order it delivers them (removed)."""
    ids: list[str] = []
    async with LocalTransport(namespace, data_dir=data_dir) as local:
        while got := await local.receive(QUEUE, max_messages=500,
                                         mode=ReceiveMode.RECEIVE_AND_DELETE):
            ids += [r.message_id for r in got]
    return ids


def where(mode: str) -> tuple[str, ...]:
    return NAMESPACES if mode == "active" else ("primary",)


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_a_thousand_kib_messages_with_growing_ids_are_sent(
        mode: str, make_sender: Callable[[str], AsyncGeoSender], data_dir: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    # Given 1,000 messages of 1 KiB with ids like r1-17 (several full SDK batches)
    messages = kib_messages(1000, lambda i: f"r1-{i}")
    # When they are sent as one batch
    with caplog.at_level("INFO", logger="geogateway"):
        result = await make_sender(mode).send_batch(messages)
    # Then the namespaces took every one, in order, in the SDK batches as packed
    assert result.namespaces == where(mode) and result.buffered == ()
    for namespace in where(mode):
        assert await queued_ids(data_dir, namespace) == [m.message_id for m in messages]
    assert "for size" not in caplog.text


def measured_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the emulator measure batches more strictly than the SDK (as a namespace
    may): the whole payload, envelope included, and 1 KiB more, so that it refuses
    every SDK batch packed full."""
    def strict(self: _servicebus.QueueWriter, delivery: Any, outer: Any) -> int:
        return len(delivery.payload) + 1024

    monkeypatch.setattr(_servicebus.QueueWriter, "batch_size", strict)


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_a_batch_refused_for_size_is_sent_in_halves_in_order(
        mode: str, make_sender: Callable[[str], AsyncGeoSender], data_dir: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Given namespaces that measure a batch as larger than the SDK does, so that
    # they refuse the SDK batches packed full
    measured_whole(monkeypatch)
    messages = kib_messages(1000, lambda i: f"r1-{i}")
    sender = make_sender(mode)
    # When the batch is sent
    with caplog.at_level("INFO", logger="geogateway"):
        result = await sender.send_batch(messages)
    # Then it went in smaller parts: each message once, in order, and it was said
    assert result.namespaces == where(mode)
    for namespace in where(mode):
        assert await queued_ids(data_dir, namespace) == [m.message_id for m in messages]
    assert "refused a batch of 1000 messages for size" in caplog.text


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_only_a_message_refused_on_its_own_is_message_too_large(
        mode: str, make_sender: Callable[[str], AsyncGeoSender], data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Given namespaces that refuse, for size, any batch holding one message (m-37)
    messages = kib_messages(100, lambda i: f"m-{i}")
    poison = messages[37].message_id
    monkeypatch.setattr(_servicebus.QueueWriter, "batch_size", _refusing(poison))
    # When the 100 messages are sent as one batch
    with pytest.raises(MessageTooLarge) as caught:
        await make_sender(mode).send_batch(messages)
    # Then only that message is refused: the 37 before it landed, in order, none after
    assert isinstance(caught.value, MessageRejected)
    assert (caught.value.sent, caught.value.message_id) == (37, poison)
    assert "37 of the batch's 100 messages, from the first, were sent" in str(caught.value)
    for namespace in where(mode):
        assert await queued_ids(data_dir, namespace) == [m.message_id for m in messages[:37]]


def _refusing(message_id: str) -> Callable[..., int]:
    """The emulator's batch measure, except that a batch holding ``message_id`` is
    always over the limit."""
    def size(self: _servicebus.QueueWriter, delivery: Any, outer: Any) -> int:
        ids = [decode_message(chunk).properties.message_id for chunk in outer.data or ()]
        if message_id in ids:
            return self.max_message_size + 1
        return _servicebus.batch_size(len(delivery.payload), outer)

    return size


async def test_a_message_too_large_for_any_batch_is_refused_with_nothing_sent(
        make_sender: Callable[[str], AsyncGeoSender], data_dir: Path) -> None:
    # Given a batch with one message over 256 KiB between two small ones
    messages = [Message(b"a", message_id="a"), Message(b"x" * 300_000, message_id="big"),
                Message(b"b", message_id="b")]
    # When it is sent, Then that message is named and nothing was sent (the SDK
    # could not pack it: no part of the batch is tried)
    with pytest.raises(MessageTooLarge, match="'big' is too large") as caught:
        await make_sender("active").send_batch(messages)
    assert (caught.value.sent, caught.value.message_id) == (0, "big")
    for namespace in NAMESPACES:
        with LocalNamespace(namespace, data_dir=data_dir) as ns:
            assert next(e.active_count for e in ns.entities() if e.name == QUEUE) == 0
