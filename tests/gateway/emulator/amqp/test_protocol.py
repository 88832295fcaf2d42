"""The emulator at the frame level: SASL, CBS, heartbeats, multi-frame transfers, refusals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventHubSharedKeyCredential

from gateway.amqp._composites import Accepted, Error, Rejected, Source, Target
from gateway.amqp._frames import (
    AMQP_HEADER,
    FRAME_AMQP,
    FRAME_SASL,
    SASL_HEADER,
    Frame,
    FrameReader,
    encode_frame,
)
from gateway.amqp._message import AmqpMessage, Properties, decode_message, encode_message
from gateway.amqp._performatives import (
    Attach,
    Begin,
    Detach,
    Disposition,
    Flow,
    Open,
    Performative,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Transfer,
)
from gateway.emulator import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator
from gateway.transports import LocalTransport
from tests.gateway.emulator.conftest import QUEUE, SMALL

pytestmark = pytest.mark.anyio


_SKIPPED = (Flow, Disposition)


class Raw:
    """A minimal AMQP client over a socket, for driving the emulator frame by frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = FrameReader()
        self.pending: list[Frame | bytes] = []

    def send(self, body: Performative, channel: int = 0, kind: int = FRAME_AMQP,
             payload: bytes = b"") -> None:
        self.writer.write(encode_frame(Frame(kind, channel, body, payload)))

    async def next(self) -> Frame | bytes:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            assert data, "the emulator closed the connection"
            self.pending += self.frames.feed(data)
        return self.pending.pop(0)

    async def expect(self, kind: type[Any]) -> Any:
        """The next frame's body, which must be a ``kind``.

        Heartbeats, flows and dispositions of other deliveries are skipped.
        """
        while True:
            item = await self.next()
            body = item.body if isinstance(item, Frame) else item
            if not isinstance(body, kind) and (body is None or isinstance(body, _SKIPPED)):
                continue
            assert isinstance(body, kind), body
            return body


@pytest.fixture
async def raw(emulator: Emulator) -> AsyncIterator[Raw]:
    reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port("primary"))
    client = Raw(reader, writer)
    yield client
    writer.close()


async def open_session(raw: Raw, *, idle: int | None = None, sasl: SaslInit | None = None
                       ) -> int:
    """SASL (when given), header, Open, Begin; the SASL outcome code (0 without SASL)."""
    code = 0
    if sasl is not None:
        raw.writer.write(SASL_HEADER)
        assert await raw.next() == SASL_HEADER
        mechanisms = await raw.expect(SaslMechanisms)
        assert "ANONYMOUS" in mechanisms.sasl_server_mechanisms
        raw.send(sasl, kind=FRAME_SASL)
        code = int((await raw.expect(SaslOutcome)).code)
        if code:
            return code
        raw.frames.expect_header()
    raw.writer.write(AMQP_HEADER)
    raw.send(Open(container_id="raw", idle_time_out=idle))
    raw.send(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100), channel=1)
    assert await raw.next() == AMQP_HEADER
    assert (await raw.expect(Open)).container_id == "geogateway-emulator-primary"
    assert (await raw.expect(Begin)).remote_channel == 1
    return code


def attach(name: str, handle: int, *, sender: bool, address: str) -> Attach:
    return Attach(name=name, handle=handle, role=not sender,
                  source=Source(address=address if not sender else name),
                  target=Target(address=address if sender else name))


async def put_token(raw: Raw, audience: str, *, signed_for: str | None = None,
                    policy: tuple[str, str] = (DEFAULT_KEY_NAME, DEFAULT_KEY)) -> int:
    """Attach to $cbs and put a token for ``audience``; the response's status code.

    ``signed_for``: sign the token for another audience than the one named.
    ``policy``: the key name and key that sign it.
    """
    raw.send(attach("cbs-out", 0, sender=False, address="$cbs"), channel=1)
    raw.send(attach("cbs-in", 1, sender=True, address="$cbs"), channel=1)
    await raw.expect(Attach)
    await raw.expect(Attach)
    raw.send(Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=0,
                  outgoing_window=100, handle=0, delivery_count=0, link_credit=10), channel=1)
    # Like the Azure SDKs, send the request without waiting for credit.
    token = EventHubSharedKeyCredential(*policy).get_token(
        signed_for or audience)
    request_id = uuid.uuid4()
    request = AmqpMessage(properties=Properties(message_id=request_id),
                          application_properties={"operation": "put-token", "name": audience,
                                                  "type": "servicebus.windows.net:sastoken"},
                          value=token.token)
    raw.send(Transfer(handle=1, delivery_id=0, delivery_tag=b"t0", message_format=0,
                      settled=False), channel=1, payload=encode_message(request))
    while not isinstance(transfer := await raw.next(), Frame) or not isinstance(
            transfer.body, Transfer):
        pass
    response = decode_message(transfer.payload)
    assert response.properties is not None
    assert response.properties.correlation_id == request_id
    assert response.application_properties is not None
    return int(response.application_properties["status-code"])


async def test_heartbeats_keep_an_idle_connection_alive(raw: Raw) -> None:
    await open_session(raw, idle=400)
    # Nothing to say: the emulator sends empty frames at half the peer's idle timeout.
    first = await raw.next()
    second = await raw.next()
    assert isinstance(first, Frame) and first.body is None
    assert isinstance(second, Frame) and second.body is None


async def test_an_entity_link_needs_a_token(raw: Raw) -> None:
    await open_session(raw)
    raw.send(attach("s", 5, sender=True, address=QUEUE), channel=1)
    answer = await raw.expect(Attach)
    assert answer.target is None  # refused
    detach = await raw.expect(Detach)
    assert detach.error is not None and detach.error.condition == "amqp:unauthorized-access"


async def test_a_multi_frame_transfer_is_reassembled(raw: Raw, data_dir: Path) -> None:
    await open_session(raw, sasl=SaslInit(mechanism="ANONYMOUS"))
    assert await put_token(raw, f"sb://127.0.0.1/{QUEUE}") == 202
    raw.send(attach("s", 5, sender=True, address=f"amqp://127.0.0.1/{QUEUE}"), channel=1)
    answer = await raw.expect(Attach)
    assert answer.target is not None and answer.max_message_size == 256 * 1024
    while (flow := await raw.expect(Flow)).handle != answer.handle:
        pass  # the flow of the $cbs link may come first
    assert flow.link_credit
    body = bytes(range(256)) * 40
    payload = encode_message(AmqpMessage(properties=Properties(message_id="big"), data=[body]))
    parts = [payload[i:i + 3000] for i in range(0, len(payload), 3000)]
    for index, part in enumerate(parts):
        more = index < len(parts) - 1
        raw.send(Transfer(handle=5, delivery_id=7 if index == 0 else None,
                          delivery_tag=b"d7" if index == 0 else None, message_format=0,
                          settled=False, more=more), channel=1, payload=part)
    outcome = await raw.expect(Disposition)
    assert (outcome.first, outcome.settled, outcome.state) == (7, True, Accepted())
    async with LocalTransport("primary", data_dir=data_dir) as local:
        [got] = await local.receive(QUEUE)
    assert (got.message_id, got.body) == ("big", body)


async def test_sasl_plain_with_the_key_grants_everything(raw: Raw) -> None:
    plain = SaslInit(mechanism="PLAIN",
                     initial_response=f"\0{DEFAULT_KEY_NAME}\0{DEFAULT_KEY}".encode())
    assert await open_session(raw, sasl=plain) == 0
    raw.send(attach("s", 5, sender=True, address=QUEUE), channel=1)
    assert (await raw.expect(Attach)).target is not None


async def test_sasl_plain_with_a_wrong_key_fails(raw: Raw) -> None:
    plain = SaslInit(mechanism="PLAIN", initial_response=b"\0RootManageSharedAccessKey\0no")
    assert await open_session(raw, sasl=plain) == 1


async def test_a_token_for_another_audience_gets_401(raw: Raw) -> None:
    await open_session(raw)
    assert await put_token(raw, f"sb://127.0.0.1/{QUEUE}", signed_for="sb://127.0.0.1/x") == 401
    raw.send(attach("s", 5, sender=True, address=QUEUE), channel=1)
    assert (await raw.expect(Attach)).target is None


async def test_an_oversized_message_is_rejected(raw: Raw) -> None:
    await open_session(raw)
    assert await put_token(raw, f"sb://127.0.0.1/{SMALL}") == 202
    raw.send(attach("s", 5, sender=True, address=SMALL), channel=1)
    assert (await raw.expect(Attach)).max_message_size == 2000
    payload = encode_message(AmqpMessage(data=[b"x" * 3000]))
    raw.send(Transfer(handle=5, delivery_id=0, delivery_tag=b"big", message_format=0,
                      settled=False), channel=1, payload=payload)
    outcome = await raw.expect(Disposition)
    assert isinstance(outcome.state, Rejected) and isinstance(outcome.state.error, Error)
    assert outcome.state.error.condition == "amqp:link:message-size-exceeded"


async def test_a_client_that_waits_for_credit_on_cbs_gets_it(raw: Raw) -> None:
    await open_session(raw)
    raw.send(attach("cbs-in", 1, sender=True, address="$cbs"), channel=1)
    await raw.expect(Attach)
    flow = await raw.expect(Flow)
    assert (flow.handle, flow.link_credit) == (0, 1000)


async def read_hub(raw: Raw, hub: str, delivery_id: int) -> int:
    """Ask ``$management`` (already attached) for ``hub``'s properties; the status code."""
    request_id = uuid.uuid4()
    request = AmqpMessage(properties=Properties(message_id=request_id, reply_to="mgmt-out"),
                          application_properties={"operation": "READ", "name": hub,
                                                  "type": "com.microsoft:eventhub"})
    raw.send(Transfer(handle=3, delivery_id=delivery_id, delivery_tag=b"m%d" % delivery_id,
                      message_format=0,
                      settled=False), channel=1, payload=encode_message(request))
    while not isinstance(transfer := await raw.next(), Frame) or not isinstance(
            transfer.body, Transfer):
        pass
    response = decode_message(transfer.payload)
    assert response.application_properties is not None
    return int(response.application_properties["status-code"])


async def attach_management(raw: Raw) -> None:
    """Attach the two $management links on channel 1 (handles 2 and 3), with credit."""
    raw.send(attach("mgmt-out", 2, sender=False, address="$management"), channel=1)
    raw.send(attach("mgmt-in", 3, sender=True, address="$management"), channel=1)
    await raw.expect(Attach)
    await raw.expect(Attach)
    raw.send(Flow(next_incoming_id=0, incoming_window=100, next_outgoing_id=1,
                  outgoing_window=100, handle=2, delivery_count=0, link_credit=10), channel=1)


async def test_a_hub_token_does_not_read_another_hubs_properties(raw: Raw) -> None:
    # Given a connection whose only token is for the event hub "telemetry"
    await open_session(raw)
    assert await put_token(raw, "sb://127.0.0.1/telemetry") == 202
    await attach_management(raw)
    # When it asks $management for a hub the token does not cover, that exists or not
    # Then the credential is refused first (401), as the service does: no 404 tells it
    # which hubs exist
    assert await read_hub(raw, "nope", 1) == 401
    assert await read_hub(raw, "other", 2) == 401
    assert await read_hub(raw, "telemetry", 3) == 200


async def test_a_token_for_the_hubs_management_node_reads_that_hub(raw: Raw) -> None:
    # Given the token @azure/event-hubs puts before it asks $management: for HUB/$management
    await open_session(raw)
    assert await put_token(raw, "sb://127.0.0.1/telemetry/$management") == 202
    await attach_management(raw)
    # When it reads that hub and another one
    # Then it reads its hub's properties only, as on the service
    assert await read_hub(raw, "telemetry", 1) == 200
    assert await read_hub(raw, "other", 2) == 401


async def test_a_token_for_the_hubs_management_node_sends_nothing(raw: Raw) -> None:
    # Given a connection whose only token is for telemetry/$management
    await open_session(raw)
    assert await put_token(raw, "sb://127.0.0.1/telemetry/$management") == 202
    # When it attaches a sender to the hub
    raw.send(attach("s", 5, sender=True, address="telemetry"), channel=1)
    # Then the link is refused: the token names the management node, not the hub
    assert (await raw.expect(Attach)).target is None
    detach = await raw.expect(Detach)
    assert detach.error is not None and detach.error.condition == "amqp:unauthorized-access"
