"""Settling by lock token over a queue's ``$management`` node through the proxy
(``com.microsoft:update-disposition``), as the unmodified azure-servicebus SDK sends
it when a settlement on its receiver link is not confirmed in time or the link
detached before it was. The requests are the SDK's own: its receiver's fallback
method, called with the lock token it read from the delivery."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusReceiver
from azure.servicebus.exceptions import MessageLockLostError, ServiceBusError

from gateway.proxy import Proxy
from gateway.transports import DEAD_LETTER_SUFFIX, LocalTransport
from replication import Message
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio


async def put(data_dir: Path, namespace: str, *ids: str) -> None:
    async with LocalTransport(namespace, data_dir=data_dir) as local:
        await local.send(QUEUE, [Message(f"body {i}", message_id=i) for i in ids])


async def by_token(receiver: ServiceBusReceiver, disposition: str,
                   message: ServiceBusReceivedMessage | uuid.UUID, **details: str) -> None:
    """What the SDK sends over ``$management`` to settle ``message`` (or the lock token
    it had: the SDK forgets a message's token once it is settled)."""
    extra = None
    if details:
        extra = {"deadletter-reason": details["reason"],
                 "deadletter-description": details["description"]}
    token = message if isinstance(message, uuid.UUID) else message.lock_token
    assert token is not None
    await receiver._settle_message_via_mgmt_link(  # the SDK's own fallback
        disposition, [token], dead_letter_details=extra)


@contextlib.asynccontextmanager
async def first_message(proxy: Proxy) -> AsyncIterator[
        tuple[ServiceBusReceiver, ServiceBusReceivedMessage, uuid.UUID]]:
    """A receiver through the proxy, the first message it gets, and its lock token."""
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        [m] = await receiver.receive_messages(max_message_count=1, max_wait_time=2)
        assert isinstance(m.lock_token, uuid.UUID)
        yield receiver, m, m.lock_token


async def test_complete_and_dead_letter_by_lock_token_reach_the_copys_namespace(
        proxy: Proxy, data_dir: Path) -> None:
    # Given two messages in the secondary namespace only
    await put(data_dir, "secondary", "done", "poison")
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        got = {m.message_id: m for m in await receiver.receive_messages(
            max_message_count=2, max_wait_time=2)}
        assert sorted(got) == ["done", "poison"]
        token = got["done"].lock_token
        assert isinstance(token, uuid.UUID)
        # When one is completed and the other dead-lettered by lock token
        await by_token(receiver, "completed", got["done"])
        await by_token(receiver, "suspended", got["poison"], reason="bad",
                       description="cannot parse")
        # Then asking again the same is answered the same (an answer came too late),
        # but settling either otherwise is refused: its lock is gone
        await by_token(receiver, "completed", token)
        with pytest.raises(MessageLockLostError):
            await by_token(receiver, "abandoned", token)
    # and the secondary holds the dead letter, and nothing else
    assert await drain_local(data_dir, "secondary", QUEUE + DEAD_LETTER_SUFFIX) == ["poison"]
    assert await drain_local(data_dir, "secondary") == []


async def test_an_abandon_by_lock_token_delivers_the_message_again(
        proxy: Proxy, data_dir: Path) -> None:
    await put(data_dir, "primary", "a")
    async with first_message(proxy) as (receiver, first, _):
        await by_token(receiver, "abandoned", first)
        [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=2)
        assert again.message_id == "a" and again.delivery_count == 1
        await receiver.complete_message(again)
    assert await drain_local(data_dir, "primary") == []


async def test_a_settlement_asked_on_the_link_and_again_by_token_is_done_once(
        proxy: Proxy, data_dir: Path) -> None:
    # Given a message in the primary namespace only
    await put(data_dir, "primary", "poison")
    async with first_message(proxy) as (receiver, m, token):
        # When the client dead-letters it on the link and asks again by lock token,
        # while the first is on its way or once it is done (what the SDK does when it
        # stopped waiting for the first answer)
        on_link = asyncio.ensure_future(receiver.dead_letter_message(m, reason="bad"))
        await asyncio.sleep(0.05)
        await by_token(receiver, "suspended", token, reason="bad", description="")
        await on_link
        # Then both are answered as done (a second dead-letter of its own would have
        # found the lock gone), but settling it otherwise is refused
        with pytest.raises(MessageLockLostError):
            await by_token(receiver, "completed", token)
    # and the message was dead-lettered once
    assert await drain_local(data_dir, "primary", QUEUE + DEAD_LETTER_SUFFIX) == ["poison"]
    assert await drain_local(data_dir, "primary") == []


async def test_unknown_tokens_and_dispositions_are_refused_with_what_to_know(
        proxy: Proxy, data_dir: Path) -> None:
    await put(data_dir, "primary", "d")
    async with first_message(proxy) as (receiver, m, token):
        # A deferral by token is not carried: said so, and the message stays locked
        with pytest.raises(ServiceBusError, match="does not carry the disposition 'defered'"):
            await by_token(receiver, "defered", m)
        await receiver.complete_message(m)
        # A token settled otherwise already, or one the proxy never gave, has lost its lock
        with pytest.raises(MessageLockLostError):
            await by_token(receiver, "abandoned", token)
        with pytest.raises(MessageLockLostError):
            await by_token(receiver, "completed", uuid.uuid4())
    assert await drain_local(data_dir, "primary") == []
