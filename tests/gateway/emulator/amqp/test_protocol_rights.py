"""A policy's rights at the frame level: SASL PLAIN with a policy, and the operations of
an entity's ``$management`` node (Send to schedule, Listen for the rest)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.amqp._frames import Frame
from gateway.amqp._message import AmqpMessage, Properties, decode_message, encode_message
from gateway.amqp._performatives import Attach, Detach, Flow, SaslInit, Transfer
from gateway.emulator import Emulator, parse_policy
from tests.gateway.emulator.amqp.test_protocol import Raw, attach, open_session
from tests.gateway.emulator.conftest import QUEUE

pytestmark = pytest.mark.anyio

KEY = "a2V5"


@pytest.fixture
async def raw(tmp_path: Path) -> AsyncIterator[Raw]:
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE], policies=[
            parse_policy(f"listener={KEY}:Listen"), parse_policy(f"sender={KEY}:Send")]) as emu:
        reader, writer = await asyncio.open_connection("127.0.0.1", emu.port("primary"))
        yield Raw(reader, writer)
        writer.close()


def plain(policy: str) -> SaslInit:
    return SaslInit(mechanism="PLAIN", initial_response=f"\0{policy}\0{KEY}".encode())


async def manage(raw: Raw, operation: str, body: dict[str, object], delivery_id: int) -> int:
    """One request to the queue's $management node (attached); the status code."""
    request = AmqpMessage(properties=Properties(message_id=uuid.uuid4(), reply_to="m-out"),
                          application_properties={"operation": operation}, value=body)
    raw.send(Transfer(handle=3, delivery_id=delivery_id, delivery_tag=b"m%d" % delivery_id,
                      message_format=0, settled=False), channel=1,
             payload=encode_message(request))
    while not isinstance(transfer := await raw.next(), Frame) or not isinstance(
            transfer.body, Transfer):
        pass
    response = decode_message(transfer.payload)
    assert response.application_properties is not None
    return int(response.application_properties["statusCode"])


async def attach_management(raw: Raw) -> None:
    raw.send(attach("m-out", 2, sender=False, address=f"{QUEUE}/$management"), channel=1)
    raw.send(attach("m-in", 3, sender=True, address=f"{QUEUE}/$management"), channel=1)
    assert (await raw.expect(Attach)).source is not None
    assert (await raw.expect(Attach)).target is not None
    raw.send(Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0,
                  outgoing_window=100, handle=2, delivery_count=0, link_credit=10), channel=1)


async def test_plain_with_a_listen_only_policy_cannot_attach_a_sender(raw: Raw) -> None:
    assert await open_session(raw, sasl=plain("listener")) == 0
    raw.send(attach("s", 5, sender=True, address=QUEUE), channel=1)
    assert (await raw.expect(Attach)).target is None
    detach = await raw.expect(Detach)
    assert detach.error is not None and detach.error.condition == "amqp:unauthorized-access"
    assert "'Send' claim" in str(detach.error.description)


async def test_a_listen_only_policy_peeks_but_cannot_schedule(raw: Raw) -> None:
    assert await open_session(raw, sasl=plain("listener")) == 0
    await attach_management(raw)
    peek = {"from-sequence-number": 1, "message-count": 1}
    assert await manage(raw, "com.microsoft:peek-message", peek, 0) in (200, 204)
    assert await manage(raw, "com.microsoft:cancel-scheduled-message",
                        {"sequence-numbers": []}, 1) == 401


async def test_a_send_only_policy_cannot_peek(raw: Raw) -> None:
    assert await open_session(raw, sasl=plain("sender")) == 0
    await attach_management(raw)
    peek = {"from-sequence-number": 1, "message-count": 1}
    assert await manage(raw, "com.microsoft:peek-message", peek, 0) == 401
