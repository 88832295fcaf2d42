"""The emulator as a server: bad input, outages, faults, configuration."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient as SyncClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import OperationTimeoutError, ServiceBusConnectionError

from gateway.amqp._composites import Error
from gateway.amqp._frames import AMQP_HEADER, Frame, FrameReader
from gateway.amqp._performatives import Close, Open
from gateway.emulator import Emulator, EmulatorThread, QueueSpec
from gateway.transports import LocalNamespace, LocalTransport
from replication import ConfigError
from tests.gateway.emulator.conftest import QUEUE

pytestmark = pytest.mark.anyio


def client(conn_str: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)


async def round_trip(conn_str: str, body: str) -> str:
    """Send one message with the SDK and receive it back; its body."""
    async with client(conn_str) as c:
        async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
            await sender.send_messages(ServiceBusMessage(body))
        async with c.get_queue_receiver(QUEUE) as r:
            [m] = await r.receive_messages(max_wait_time=2)
            await r.complete_message(m)
    return str(m)


async def raw_exchange(port: int, data: bytes) -> list[Frame | bytes]:
    """Write ``data`` on a new socket; everything the emulator answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    frames = FrameReader()
    got: list[Frame | bytes] = []
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            got += frames.feed(chunk)
    finally:
        writer.close()
    return got


async def test_a_malformed_frame_closes_only_its_connection(emulator: Emulator,
                                                            conn_str: str) -> None:
    port = emulator.port("primary")
    # Given an SDK client at work, and a socket that sends an undecodable frame
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("before"))
        garbage = b"\x00\x00\x00\x10\x02\x00\x00\x00" + b"\xde\xad\xbe\xef" * 2
        got = await raw_exchange(port, AMQP_HEADER + garbage)
        # Then that connection is closed with the decode error ...
        assert got[0] == AMQP_HEADER
        bodies = [item.body for item in got[1:] if isinstance(item, Frame)]
        assert isinstance(bodies[0], Open) and isinstance(bodies[-1], Close)
        assert isinstance(bodies[-1].error, Error)
        assert bodies[-1].error.condition == "amqp:decode-error"
        # ... and the SDK client on another connection keeps working
        await sender.send_messages(ServiceBusMessage("after"))
    async with LocalTransport("primary", data_dir=emulator_dir(emulator)) as local:
        got_bodies = [r.body for r in await local.receive(QUEUE, max_messages=5)]
    assert got_bodies == [b"before", b"after"]


def emulator_dir(emulator: Emulator) -> Path:
    return Path(emulator._namespaces["primary"].db_path).parent


async def test_a_foreign_protocol_gets_the_amqp_header_and_a_closed_socket(
        emulator: Emulator) -> None:
    # Neither AMQP nor HTTP (the administration API and AMQP over WebSockets answer
    # HTTP on this port: see admin/ and test_websocket)
    got = await raw_exchange(emulator.port("primary"), b"SSH-2.0-OpenSSH_9.6\r\n")
    assert got == [AMQP_HEADER]


async def test_down_fails_fast_and_up_serves_again(emulator: Emulator, conn_str: str,
                                                   data_dir: Path) -> None:
    namespace = LocalNamespace("primary", data_dir=data_dir)
    async with client(conn_str) as c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        await sender.send_messages(ServiceBusMessage("up"))
        # When the namespace goes down, an open connection fails at its next send
        namespace.down()
        await asyncio.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(ServiceBusConnectionError):
            await sender.send_messages(ServiceBusMessage("down"))
        assert time.monotonic() - started < 2
    # and a new client cannot connect
    async with client(conn_str) as c:
        started = time.monotonic()
        with pytest.raises(ServiceBusConnectionError):
            async with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
                await sender.send_messages(ServiceBusMessage("down"))
        assert time.monotonic() - started < 2
    # When it comes back up, the same connection string works again
    namespace.up()
    await asyncio.sleep(0.3)
    assert await round_trip(conn_str, "back") == "up"
    namespace.close()


async def test_lost_replies_store_the_message_but_the_sender_times_out(
        conn_str: str, data_dir: Path) -> None:
    namespace = LocalNamespace("primary", data_dir=data_dir)
    namespace.set_faults(lost_replies=1.0)
    await asyncio.sleep(0.3)
    c = ServiceBusClient.from_connection_string(conn_str, retry_total=0, socket_timeout=0.05)
    async with c, c.get_queue_sender(QUEUE, keep_alive=None) as sender:
        with pytest.raises(OperationTimeoutError):
            await sender.send_messages(ServiceBusMessage("landed"), timeout=1)
    namespace.set_faults()
    namespace.close()
    async with LocalTransport("primary", data_dir=data_dir) as local:
        assert [r.body for r in await local.receive(QUEUE)] == [b"landed"]


async def test_latency_delays_replies_and_names_match_in_any_case(conn_str: str,
                                                                  data_dir: Path) -> None:
    namespace = LocalNamespace("primary", data_dir=data_dir)
    async with client(conn_str) as c, c.get_queue_sender(QUEUE.upper(), keep_alive=None) as s:
        await s.send_messages(ServiceBusMessage("any case"))
        namespace.set_faults(latency=0.5)
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await s.send_messages(ServiceBusMessage("slow"))
        assert time.monotonic() - started >= 0.45
    namespace.set_faults()
    namespace.close()
    async with LocalTransport("primary", data_dir=data_dir) as local:
        got = [r.body for r in await local.receive(QUEUE, max_messages=5)]
    assert got == [b"any case", b"slow"]


async def test_a_port_in_use_is_a_config_error(emulator: Emulator, data_dir: Path) -> None:
    taken = emulator.port("primary")
    with pytest.raises(ConfigError, match="cannot listen"):
        async with Emulator({"other": taken}, data_dir=data_dir):
            pass


async def test_an_entity_declared_with_other_settings_is_a_config_error(
        emulator: Emulator, data_dir: Path) -> None:
    with pytest.raises(ConfigError, match="other settings"):
        async with Emulator({"primary": 0}, data_dir=data_dir,
                            queues=[QueueSpec(name=QUEUE, lock_duration=5.0)]):
            pass


def test_emulator_thread_serves_the_sync_sdk(tmp_path: Path) -> None:
    with EmulatorThread(Emulator({"primary": 0}, data_dir=tmp_path, queues=[QUEUE])) as emu:
        conn_str = emu.connection_string("primary")
        assert conn_str.startswith(f"Endpoint=sb://127.0.0.1:{emu.port('primary')};")
        with SyncClient.from_connection_string(conn_str, retry_total=0) as c:
            with c.get_queue_sender(QUEUE, keep_alive=None) as sender:
                sender.send_messages(ServiceBusMessage("sync"))
            with c.get_queue_receiver(QUEUE) as r:
                [m] = r.receive_messages(max_wait_time=2)
                r.complete_message(m)
    assert str(m) == "sync"


def test_constructor_checks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        Emulator({}, data_dir=tmp_path)
    with pytest.raises(ConfigError):
        Emulator({"a": 5000, "b": 5000}, data_dir=tmp_path)
    with pytest.raises(ConfigError):
        Emulator({"bad name!": 0}, data_dir=tmp_path)
    emu = Emulator({"primary": 0}, data_dir=tmp_path, key="s3cret")
    assert "s3cret" not in emu.connection_string("primary", redact_key=True)
    with pytest.raises(ConfigError):
        emu.port("nope")


async def test_a_namespace_down_at_start_keeps_its_port_for_up(data_dir: Path) -> None:
    namespace = LocalNamespace("primary", data_dir=data_dir)
    namespace.down()
    async with Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE]) as emu:
        port = emu.port("primary")
        assert port != 0
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        namespace.up()
        await asyncio.sleep(0.3)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    namespace.close()


def _bind(port: int) -> None:
    """Bind ``port`` as a program asking for a free port would (no SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


async def test_a_port_is_kept_from_other_programs_while_its_namespace_is_down(
        data_dir: Path) -> None:
    # Given a namespace serving on a port the system picked
    namespace = LocalNamespace("primary", data_dir=data_dir)
    async with Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE]) as emu:
        port = emu.port("primary")
        # When it goes down
        namespace.down()
        await asyncio.sleep(0.3)
        # Then a connection is refused, and no other program can bind its port
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(OSError) as bound:
            _bind(port)
        assert bound.value.errno == errno.EADDRINUSE
        # When it comes back up, it serves on the same port
        namespace.up()
        await asyncio.sleep(0.3)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    # and once the emulator is closed, the port is free again (to listen on, as a
    # server does: its closed connections may linger in TIME_WAIT)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
    namespace.close()

