"""Peek-lock receives through the proxy with the unmodified azure-servicebus SDK: the
first copy of each message from either namespace, settled in the copy's namespace."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.servicebus import ServiceBusReceivedMessage

from gateway.proxy import Proxy
from gateway.transports import DEAD_LETTER_SUFFIX, LocalNamespace, LocalTransport
from replication import Message
from tests.gateway.proxy.conftest import QUEUE, client, drain_local

pytestmark = pytest.mark.anyio


async def put_in_both(data_dir: Path, *ids: str) -> None:
    """What an active geo sender leaves: each message in both namespaces, one id."""
    for name in ("primary", "secondary"):
        async with LocalTransport(name, data_dir=data_dir) as local:
            await local.send(QUEUE, [Message(f"body {i}", message_id=i) for i in ids])


async def receive_all(proxy: Proxy, settle: str = "complete") -> list[ServiceBusReceivedMessage]:
    """Receive until nothing comes, settling each; the messages, each checked to be locked."""
    got: list[ServiceBusReceivedMessage] = []
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        while batch := await receiver.receive_messages(max_message_count=10, max_wait_time=0.5):
            for m in batch:
                got.append(m)
                # Locked until settled (the SDK forgets the lock token then)
                assert m.lock_token is not None and m.locked_until_utc is not None
                if settle == "complete":
                    await receiver.complete_message(m)
                else:
                    await receiver.dead_letter_message(m, reason="bad", error_description="d")
    return got


async def test_messages_in_both_namespaces_are_received_once(
        proxy: Proxy, data_dir: Path) -> None:
    # Given five messages, each sent to both namespaces with the same id
    ids = [f"m{i}" for i in range(5)]
    await put_in_both(data_dir, *ids)
    # When a client receives through the proxy and completes what it gets
    got = await receive_all(proxy)
    # Then it got each message exactly once, with its body and MessageId
    assert sorted(m.message_id for m in got) == ids
    assert {str(m) for m in got} == {f"body {i}" for i in ids}
    # and neither namespace delivers them again
    assert await receive_all(proxy) == []


async def test_a_dead_letter_goes_to_the_namespace_of_the_copy(
        proxy: Proxy, data_dir: Path) -> None:
    # Given a message only in the secondary namespace
    async with LocalTransport("secondary", data_dir=data_dir) as local:
        await local.send(QUEUE, [Message("poison", message_id="p")])
    # When the client dead-letters it through the proxy
    [m] = await receive_all(proxy, settle="dead_letter")
    # Then it is in the secondary's dead-letter queue, with the reason given
    assert m.message_id == "p"
    assert await drain_local(data_dir, "secondary", QUEUE + DEAD_LETTER_SUFFIX) == ["p"]
    assert await drain_local(data_dir, "secondary") == []


async def test_an_abandoned_message_is_delivered_again(proxy: Proxy, data_dir: Path) -> None:
    await put_in_both(data_dir, "a")
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        [first] = await receiver.receive_messages(max_message_count=1, max_wait_time=2)
        await receiver.abandon_message(first)
        [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=2)
        assert again.message_id == "a"
        await receiver.complete_message(again)


async def test_a_receiver_link_outlives_an_outage_of_both_namespaces(
        proxy: Proxy, data_dir: Path) -> None:
    # Given a message in the secondary, and a client receiving through the proxy
    async with LocalTransport("secondary", data_dir=data_dir) as local:
        await local.send(QUEUE, [Message("after", message_id="after")])
    namespaces = [LocalNamespace(name, data_dir=data_dir) for name in ("primary", "secondary")]
    async with client(proxy.connection_string()) as c, \
            c.get_queue_receiver(QUEUE, max_wait_time=1) as receiver:
        # When both namespaces are down, nothing is delivered (and the link stays)
        for ns in namespaces:
            ns.down()
        assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        # Then once the secondary is back, the same link delivers its message
        namespaces[1].up()
        [m] = await receiver.receive_messages(max_message_count=1, max_wait_time=3)
        assert m.message_id == "after"
        await receiver.complete_message(m)
