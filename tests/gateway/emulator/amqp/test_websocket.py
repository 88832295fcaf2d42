"""AMQP over WebSockets on a namespace's own port: the unmodified SDKs, and the wire."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import struct
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub import EventHubConsumerClient as SyncConsumer
from azure.eventhub import EventHubProducerClient as SyncProducer
from azure.eventhub.aio import EventHubConsumerClient, EventHubProducerClient
from azure.servicebus import ServiceBusClient as SyncClient
from azure.servicebus import ServiceBusMessage, TransportType
from azure.servicebus.aio import ServiceBusClient

from gateway.amqp._frames import AMQP_HEADER, FRAME_AMQP, Frame, FrameReader, encode_frame
from gateway.amqp._performatives import Close, Open
from gateway.amqp.server import _websocket
from gateway.emulator import Emulator, EmulatorThread, EventHubSpec
from gateway.transports import LocalTransport
from tests.gateway.emulator.conftest import HUB, QUEUE

pytestmark = [
    pytest.mark.anyio,
    # The async SDKs pass aiohttp ssl=None for a plain ws:// URL, which aiohttp 3.13+
    # deprecates (a warning only; the connection is made).
    pytest.mark.filterwarnings("ignore:ssl=None is deprecated:DeprecationWarning"),
]


@pytest.fixture
async def emulator(data_dir: Path) -> AsyncIterator[Emulator]:
    """The raw WebSocket checks talk to the AMQP side alone: with the administration
    API on (the SDK tests here), HTTP that asks for no upgrade is the API's."""
    async with Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE],
                        event_hubs=[EventHubSpec(name=HUB, partitions=4)], admin=False) as emu:
        yield emu


def over_websockets(emulator: Emulator) -> dict[str, Any]:
    """The SDK keywords that dial the namespace's own port over WebSockets.

    Without ``custom_endpoint_address`` the SDKs drop the port for WebSockets (the sync
    one dials port 80, the async one 443).
    """
    return {"transport_type": TransportType.AmqpOverWebsocket,
            "custom_endpoint_address": f"sb://127.0.0.1:{emulator.port('primary')}",
            "retry_total": 0}


# -- the unmodified SDKs ------------------------------------------------------------


async def test_servicebus_async_sends_receives_and_completes(emulator: Emulator,
                                                             conn_str: str) -> None:
    # Given the async client over WebSockets
    async with ServiceBusClient.from_connection_string(
            conn_str, **over_websockets(emulator)) as c:
        # When a message is sent, received and completed
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(ServiceBusMessage("over ws", message_id="ws-1"))
        async with c.get_queue_receiver(QUEUE) as r:
            [m] = await r.receive_messages(max_wait_time=2)
            await r.complete_message(m)
            # Then it came back whole, and once completed it is gone
            assert (str(m), m.message_id) == ("over ws", "ws-1")
            assert await r.receive_messages(max_wait_time=0.3) == []


def test_servicebus_sync_sends_receives_and_completes(tmp_path: Path) -> None:
    emulator = Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE])
    # Given the sync client (websocket-client) over WebSockets
    with EmulatorThread(emulator) as emu, SyncClient.from_connection_string(
            emu.connection_string("primary"), **over_websockets(emu)) as c:
        # When a message is sent, received and completed
        with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            sender.send_messages(ServiceBusMessage("sync ws", message_id="ws-2"))
        with c.get_queue_receiver(QUEUE) as r:
            [m] = r.receive_messages(max_wait_time=2)
            r.complete_message(m)
            # Then it came back whole, and once completed it is gone
            assert (str(m), m.message_id) == ("sync ws", "ws-2")
            assert r.receive_messages(max_wait_time=0.3) == []


async def test_eventhubs_async_sends_and_receives_by_partition(emulator: Emulator,
                                                               conn_str: str) -> None:
    ws = over_websockets(emulator)
    # Given events sent to partition 2 over WebSockets
    async with EventHubProducerClient.from_connection_string(
            conn_str, eventhub_name=HUB, **ws) as producer:
        batch = await producer.create_batch(partition_id="2")
        for body in ("e0", "e1", "e2"):
            batch.add(EventData(body))
        await producer.send_batch(batch)
    # When partition 2 is read over WebSockets from the start
    got: list[str] = []
    done = asyncio.Event()

    async def on_event(context: Any, event: Any) -> None:
        got.append(event.body_as_str())
        if len(got) == 3:
            done.set()

    async with EventHubConsumerClient.from_connection_string(
            conn_str, consumer_group="$Default", eventhub_name=HUB, **ws) as consumer:
        task = asyncio.create_task(consumer.receive(
            on_event, partition_id="2", starting_position="-1"))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), 5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Then the three events come back, in order
    assert got == ["e0", "e1", "e2"]


def test_eventhubs_sync_sends_and_receives_by_partition(tmp_path: Path) -> None:
    hubs = [EventHubSpec(name=HUB, partitions=4)]
    with EmulatorThread(Emulator({"primary": 0}, data_dir=tmp_path, event_hubs=hubs)) as emu:
        conn_str, ws = emu.connection_string("primary"), over_websockets(emu)
        # Given events sent to partition 1 by the sync producer over WebSockets
        with SyncProducer.from_connection_string(conn_str, eventhub_name=HUB, **ws) as producer:
            batch = producer.create_batch(partition_id="1")
            for body in ("s0", "s1"):
                batch.add(EventData(body))
            producer.send_batch(batch)
        # When the sync consumer reads partition 1 over WebSockets
        got: list[str] = []
        done = threading.Event()

        def on_event(context: Any, event: Any) -> None:
            got.append(event.body_as_str())
            if len(got) == 2:
                done.set()

        consumer = SyncConsumer.from_connection_string(
            conn_str, consumer_group="$Default", eventhub_name=HUB, **ws)
        reader = threading.Thread(target=consumer.receive, kwargs={
            "on_event": on_event, "partition_id": "1", "starting_position": "-1"})
        reader.start()
        done.wait(10)
        consumer.close()
        reader.join(10)
    # Then both events come back, in order
    assert got == ["s0", "s1"]


# -- the wire -------------------------------------------------------------------------

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455's example: its accept is s3pPLMBiTxaQ9kYGzzhZRbK+xOo=


def request(path: str = _websocket.PATH, **headers: str) -> bytes:
    fields = {"Host": "127.0.0.1", "Upgrade": "websocket", "Connection": "Upgrade",
              "Sec-WebSocket-Key": KEY, "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Protocol": "AMQPWSB10"}
    for name, value in headers.items():
        fields.pop(name.replace("_", "-"), None)
        if value:
            fields[name.replace("_", "-")] = value
    lines = [f"GET {path} HTTP/1.1", *(f"{k}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def client_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, masked: bool = True,
                 length: int | None = None) -> bytes:
    """A frame as a client sends it (``length``: declare another length than sent)."""
    n = len(payload) if length is None else length
    first = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", first, (0x80 if masked else 0) | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, (0x80 if masked else 0) | 126, n)
    else:
        head = struct.pack("!BBQ", first, (0x80 if masked else 0) | 127, n)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Peer:
    """A raw WebSocket client on the emulator's AMQP port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, emulator: Emulator, data: bytes) -> tuple[Peer, bytes]:
        """Connect, write ``data`` (a handshake request); the peer and the answer's head."""
        reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port("primary"))
        writer.write(data)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        return cls(reader, writer), head

    async def frame(self) -> tuple[int, bytes]:
        """The next frame from the server: (opcode, payload); it must be final and unmasked."""
        b0, b1 = await asyncio.wait_for(self.reader.readexactly(2), 5)
        assert b0 & 0x80 and not b1 & 0x80, (b0, b1)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", await self.reader.readexactly(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
        return b0 & 0x0F, await self.reader.readexactly(n)

    async def closed(self) -> bool:
        """Whether the server closed the socket (end of file within 5 s)."""
        return await asyncio.wait_for(self.reader.read(), 5) == b""


async def upgraded(emulator: Emulator) -> Peer:
    peer, head = await Peer.connect(emulator, request())
    assert head.startswith(b"HTTP/1.1 101 "), head
    return peer


async def test_the_handshake_accepts_the_key_and_echoes_the_subprotocol(
        emulator: Emulator) -> None:
    # When a client upgrades with RFC 6455's example key
    peer, head = await Peer.connect(emulator, request())
    # Then the answer is 101 with that key's accept value and the subprotocol
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 101 Switching Protocols"
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in lines
    assert "Sec-WebSocket-Protocol: AMQPWSB10" in lines
    # and the AMQP header sent in two fragments is answered with the header
    peer.writer.write(client_frame(0x2, AMQP_HEADER[:3], fin=False)
                      + client_frame(0x0, AMQP_HEADER[3:]))
    assert await peer.frame() == (0x2, AMQP_HEADER)
    # a ping gets its pong
    peer.writer.write(client_frame(0x9, b"are you there"))
    assert await peer.frame() == (0xA, b"are you there")
    # and the client's close is answered with a close of the same code, then end of file
    peer.writer.write(client_frame(0x8, struct.pack("!H", 1000) + b"bye"))
    assert await peer.frame() == (0x8, struct.pack("!H", 1000))
    assert await peer.closed()
    peer.writer.close()


@pytest.mark.parametrize("answer", [True, False], ids=["peer-answers", "peer-silent"])
async def test_an_amqp_close_ends_with_the_servers_close_handshake(emulator: Emulator,
                                                                  answer: bool) -> None:
    # Given an AMQP connection over a WebSocket
    peer = await upgraded(emulator)
    for item in (AMQP_HEADER, encode_frame(Frame(FRAME_AMQP, 0, Open(container_id="raw")))):
        peer.writer.write(client_frame(0x2, item))
    # When the client closes the AMQP connection
    peer.writer.write(client_frame(0x2, encode_frame(Frame(FRAME_AMQP, 0, Close()))))
    # Then the server answers the header, Open and Close in binary messages
    frames, got = FrameReader(), []
    while not any(isinstance(f, Frame) and isinstance(f.body, Close) for f in got):
        opcode, payload = await peer.frame()
        assert opcode == 0x2
        got += frames.feed(payload)
    # and begins the close handshake with 1000
    assert await peer.frame() == (0x8, struct.pack("!H", 1000))
    started = asyncio.get_running_loop().time()
    if answer:
        peer.writer.write(client_frame(0x8, struct.pack("!H", 1000)))
    # and closes the socket once the peer answered, or after the grace period
    assert await peer.closed()
    waited = asyncio.get_running_loop().time() - started
    grace = _websocket.CLOSE_GRACE * 0.9
    assert waited < grace if answer else waited >= grace
    peer.writer.close()


@pytest.mark.parametrize(("data", "status"), [
    (request("/other"), b"404"),
    (request(Upgrade="", Connection=""), b"426"),
    (request(Sec_WebSocket_Version="8"), b"426"),
    (request(Sec_WebSocket_Key=""), b"400"),
    (request(Sec_WebSocket_Key=base64.b64encode(b"short").decode()), b"400"),
    (request(Sec_WebSocket_Protocol=""), b"400"),
    (request(Sec_WebSocket_Protocol="mqtt"), b"400"),
    (b"GARBLED\r\n\r\n", b"400"),
], ids=["path", "no-upgrade", "version", "no-key", "short-key", "no-subprotocol",
        "other-subprotocol", "garbled"])
async def test_a_refused_handshake_gets_a_clear_http_error_and_a_closed_socket(
        emulator: Emulator, data: bytes, status: bytes) -> None:
    peer, head = await Peer.connect(emulator, data)
    assert head.split(b" ")[1] == status, head
    assert b"Connection: close" in head
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    reason = await peer.reader.readexactly(length)
    assert reason.strip(), "the refusal says why"
    assert await peer.closed()
    peer.writer.close()


@pytest.mark.parametrize(("frame", "code"), [
    (client_frame(0x2, AMQP_HEADER, masked=False), 1002),
    (client_frame(0x1, b"AMQP"), 1003),
    (client_frame(0x0, AMQP_HEADER), 1002),
    (client_frame(0x2, b"AMQP", fin=False) + client_frame(0x2, b"\x00\x01\x00\x00"), 1002),
    (client_frame(0x9, b"x" * 126), 1002),
    (client_frame(0x9, b"x", fin=False), 1002),
    (client_frame(0x3, b"x"), 1002),
    (bytes([0xC2]) + client_frame(0x2, AMQP_HEADER)[1:], 1002),
    (client_frame(0x2, length=_websocket.MAX_MESSAGE_SIZE + 1), 1009),
], ids=["unmasked", "text", "stray-continuation", "interleaved-message", "long-ping",
        "fragmented-ping", "unknown-opcode", "reserved-bit", "too-big"])
async def test_a_malformed_frame_gets_a_close_code_and_the_server_serves_on(
        emulator: Emulator, conn_str: str, frame: bytes, code: int,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.emulator")
    # Given an SDK client on another WebSocket connection
    async with ServiceBusClient.from_connection_string(
            conn_str, **over_websockets(emulator)) as c, c.get_queue_sender(
            QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("before"))
        # When a raw client sends a malformed frame
        peer = await upgraded(emulator)
        peer.writer.write(frame)
        # Then it gets a close frame with the code and a reason, and end of file
        opcode, payload = await peer.frame()
        assert opcode == 0x8 and struct.unpack("!H", payload[:2])[0] == code
        assert payload[2:].decode()
        assert await peer.closed()
        peer.writer.close()
        # and the SDK client keeps working
        await sender.send_messages(ServiceBusMessage("after"))
    # with one log line for the failure and no traceback
    assert any(f" {code} " in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    async with LocalTransport("primary", data_dir=emulator_dir(emulator)) as local:
        assert [r.body for r in await local.receive(QUEUE, max_messages=5)] == [
            b"before", b"after"]


async def test_plain_amqp_is_still_served_on_the_same_port(emulator: Emulator,
                                                            conn_str: str) -> None:
    async with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as c, \
            c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("tcp"))
    async with LocalTransport("primary", data_dir=emulator_dir(emulator)) as local:
        assert [r.body for r in await local.receive(QUEUE)] == [b"tcp"]


def emulator_dir(emulator: Emulator) -> Path:
    return Path(emulator._namespaces["primary"].db_path).parent
