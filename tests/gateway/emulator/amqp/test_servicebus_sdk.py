"""The unmodified azure-servicebus SDK against the emulator."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageSizeExceededError,
    ServiceBusAuthenticationError,
)

from gateway.emulator import Emulator
from gateway.transports import LocalTransport
from replication import Message
from tests.gateway.emulator.conftest import QUEUE, SHORT_LOCK, SMALL

pytestmark = pytest.mark.anyio


def client(conn_str: str) -> ServiceBusClient:
    # A short socket timeout: the SDK waits that long for frames that do not come
    # (twice when it drains a receiver on close).
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)


async def send(conn_str: str, queue: str, *messages: ServiceBusMessage) -> None:
    # No keep-alive task: closing the sender would wait for its one-second sleep.
    async with client(conn_str) as c, c.get_queue_sender(queue, keep_alive=None) as sender:
        await sender.send_messages(list(messages))


async def put(data_dir: Path, queue: str, *messages: Message) -> None:
    """Send through local://primary: quicker than opening an SDK sender."""
    async with LocalTransport("primary", data_dir=data_dir) as local:
        await local.send(queue, list(messages))


async def test_send_receive_complete(conn_str: str) -> None:
    # Given a message sent with an id and application properties
    await send(conn_str, QUEUE, ServiceBusMessage(
        "hello", message_id="m-1", application_properties={"n": 7, "s": "x", "b": True}))

    async with client(conn_str) as c, c.get_queue_receiver(QUEUE, max_wait_time=1) as r:
        # When it is received in peek-lock mode and completed
        [m] = await r.receive_messages(max_message_count=10, max_wait_time=1)
        # Then it carries what was sent and the broker's metadata
        assert (str(m), m.message_id, m.delivery_count) == ("hello", "m-1", 0)
        assert m.application_properties == {b"n": 7, b"s": b"x", b"b": True}
        assert m.sequence_number is not None and m.lock_token is not None
        assert m.locked_until_utc is not None and m.enqueued_time_utc is not None
        assert m.locked_until_utc > datetime.datetime.now(datetime.timezone.utc)
        # and once completed it is gone
        await r.complete_message(m)
        assert await r.receive_messages(max_wait_time=0.3) == []


async def test_batch_send_and_receive_and_delete(conn_str: str, data_dir: Path) -> None:
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        batch = await sender.create_message_batch()
        for i in range(5):
            batch.add_message(ServiceBusMessage(f"b{i}", message_id=f"id-{i}"))
        await sender.send_messages(batch)

    async with client(conn_str) as c, c.get_queue_receiver(
            QUEUE, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
        got = await r.receive_messages(max_message_count=5, max_wait_time=1)
    assert [m.message_id for m in got] == [f"id-{i}" for i in range(5)]
    assert [str(m) for m in got] == [f"b{i}" for i in range(5)]
    assert all(m.lock_token is None for m in got)
    async with LocalTransport("primary", data_dir=data_dir) as local:
        assert await local.receive(QUEUE) == []  # deleted on receipt


async def test_peek_then_abandon_redelivers_with_a_higher_delivery_count(
        conn_str: str, data_dir: Path) -> None:
    await put(data_dir, QUEUE, Message(b"again", message_id="a"), Message(b"b", message_id="b"))
    async with client(conn_str) as c, c.get_queue_receiver(QUEUE) as r:
        # Peeking neither locks nor counts a delivery
        peeked = await r.peek_messages(max_message_count=5)
        [first] = await r.receive_messages(max_wait_time=1)
        await r.abandon_message(first)
        [second, other] = await r.receive_messages(max_message_count=2, max_wait_time=1)
        await r.complete_message(second)
        await r.complete_message(other)
    assert [m.message_id for m in peeked] == ["a", "b"]
    assert (first.message_id, first.delivery_count) == ("a", 0)
    assert (second.message_id, second.delivery_count) == ("a", 1)
    assert (other.message_id, other.delivery_count) == ("b", 0)


async def test_dead_letter_and_read_the_dead_letter_queue(conn_str: str, data_dir: Path) -> None:
    await put(data_dir, QUEUE, Message(b"poison", message_id="p"))
    async with client(conn_str) as c:
        async with c.get_queue_receiver(QUEUE) as r:
            [m] = await r.receive_messages(max_wait_time=1)
            await r.dead_letter_message(m, reason="Bad", error_description="cannot parse")
        async with c.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [dead] = await dlq.receive_messages(max_wait_time=1)
            await dlq.complete_message(dead)
    assert (dead.message_id, str(dead)) == ("p", "poison")
    assert (dead.dead_letter_reason, dead.dead_letter_error_description) == (
        "Bad", "cannot parse")
    assert dead.dead_letter_source == QUEUE


async def test_max_delivery_count_dead_letters(conn_str: str, data_dir: Path) -> None:
    await put(data_dir, SHORT_LOCK, Message(b"x", message_id="mdc"))
    async with client(conn_str) as c, c.get_queue_receiver(SHORT_LOCK) as r:
        for _ in range(3):
            [m] = await r.receive_messages(max_wait_time=1)
            await r.abandon_message(m)
    async with LocalTransport("primary", data_dir=data_dir) as local:
        assert await local.receive(SHORT_LOCK) == []
        [dead] = await local.receive(SHORT_LOCK + "/$DeadLetterQueue")
    assert dead.message.properties["DeadLetterReason"] == "MaxDeliveryCountExceeded"


async def test_locks_expire_and_renew(conn_str: str, data_dir: Path) -> None:
    # Given two messages received under 1 s locks
    await put(data_dir, SHORT_LOCK, Message(b"renewed", message_id="r"),
              Message(b"slow", message_id="s"))
    async with client(conn_str) as c, c.get_queue_receiver(SHORT_LOCK) as r:
        renewed, slow = await r.receive_messages(max_message_count=2, max_wait_time=1)
        before = renewed.locked_until_utc
        assert before is not None
        # When one lock is renewed half-way and the other is not
        await asyncio.sleep(0.6)
        assert await r.renew_message_lock(renewed) > before
        await asyncio.sleep(0.6)
        # Then the renewed one completes, past its first lock
        await r.complete_message(renewed)
        # and the other lock is lost: the emulator refuses to renew it, the SDK to settle it
        with pytest.raises(MessageLockLostError):
            await r.renew_message_lock(slow)
        with pytest.raises(MessageLockLostError):
            await r.complete_message(slow)
        # and the message is delivered again, counted
        [again] = await r.receive_messages(max_wait_time=2)
        assert (again.message_id, again.delivery_count) == ("s", 1)
        # A settlement the SDK believes in, on a lock the emulator lost, is refused too.
        await asyncio.sleep(1.2)
        again._expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
            minutes=5)
        with pytest.raises(MessageLockLostError):
            await r.complete_message(again)


async def test_unknown_entity_is_refused_at_the_token_as_on_the_service(conn_str: str) -> None:
    # The service answers the $cbs put-token with 404 (after checking the credential);
    # the SDK raises that as an authentication failure that carries the status.
    async with client(conn_str) as c:
        with pytest.raises(ServiceBusAuthenticationError) as info:
            async with c.get_queue_sender("nope") as sender:
                await sender.send_messages(ServiceBusMessage("x"))
        assert info.value.inner_exception.status_code == 404
        assert b"could not be found" in info.value.inner_exception.status_description
        with pytest.raises(ServiceBusAuthenticationError):
            async with c.get_queue_receiver("nope") as r:
                await r.receive_messages(max_wait_time=0.5)


async def test_oversized_message_is_refused(conn_str: str) -> None:
    async with client(conn_str) as c, c.get_queue_sender(SMALL) as sender:
        with pytest.raises(MessageSizeExceededError):
            await sender.send_messages(ServiceBusMessage(b"x" * 5000))
        await sender.send_messages(ServiceBusMessage(b"x" * 100))


async def test_wrong_key_is_refused_without_showing_the_key(emulator: Emulator) -> None:
    secret = "d3JvbmcgZGV2ZWxvcG1lbnQga2V5"
    bad = emulator.connection_string("primary").replace(
        "SharedAccessKey=" + emulator.connection_string("primary").split(
            "SharedAccessKey=")[1].split(";")[0], "SharedAccessKey=" + secret)
    async with client(bad) as c:
        with pytest.raises(ServiceBusAuthenticationError) as info:
            async with c.get_queue_sender(QUEUE) as sender:
                await sender.send_messages(ServiceBusMessage("x"))
    assert secret not in str(info.value)
    assert secret not in repr(info.value.__cause__)


async def test_local_and_emulated_namespaces_share_their_queues(conn_str: str,
                                                                data_dir: Path) -> None:
    # Given a message sent through local://primary
    async with LocalTransport("primary", data_dir=data_dir) as local:
        await local.send(QUEUE, [Message(b"from local", message_id="L", properties={"k": 1})])
        # When the SDK receives through the emulator, and sends one back
        async with client(conn_str) as c:
            async with c.get_queue_receiver(QUEUE) as r:
                [m] = await r.receive_messages(max_wait_time=2)
                await r.complete_message(m)
            await send(conn_str, QUEUE, ServiceBusMessage("from sdk", message_id="S"))
        # Then each side reads what the other wrote
        [back] = await local.receive(QUEUE, max_wait=1)
        await local.complete(back)
    assert (m.message_id, str(m), m.application_properties) == ("L", "from local", {b"k": 1})
    assert (back.message_id, back.body) == ("S", b"from sdk")
    # and the other namespace has queues of its own
    async with LocalTransport("secondary", data_dir=data_dir) as other:
        assert await other.receive(QUEUE) == []
