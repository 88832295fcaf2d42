"""A hung emulated namespace: it accepts connections and answers nothing until cleared.

``geogateway namespace faults NAME --hang`` freezes the namespace as a hung front end
would; ``--no-hang`` closes the connections it stalled, and the SDKs reconnect. The
real azure-servicebus and azure-eventhub clients, and a raw AMQP socket, against it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from gateway.amqp._composites import Error
from gateway.amqp._frames import AMQP_HEADER, Frame
from gateway.amqp._performatives import Begin, Close
from gateway.cli import main
from gateway.emulator import Emulator
from gateway.transports import EventPosition, LocalTransport
from tests.gateway.emulator.amqp.test_protocol import Raw, open_session
from tests.gateway.emulator.conftest import HUB, QUEUE

pytestmark = pytest.mark.anyio

#: How long a test waits for an answer that a hung namespace must not give. Operations
#: take milliseconds on a namespace that answers, so none within this is a hang.
UNANSWERED = 2.0


def namespace_faults(data_dir: Path, *flags: str) -> None:
    """``geogateway namespace faults primary FLAGS`` (in this process)."""
    assert main(["namespace", "faults", "primary", *flags, "--data-dir", str(data_dir)]) == 0


async def connect(emulator: Emulator) -> Raw:
    reader, writer = await asyncio.open_connection("127.0.0.1", emulator.port("primary"))
    return Raw(reader, writer)


async def unanswered(raw: Raw, within: float) -> list[Frame | bytes]:
    """What ``raw`` receives within ``within`` seconds (the connection must stay open)."""
    got: list[Frame | bytes] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while True:
                data = await raw.reader.read(65536)
                assert data, "the emulator closed the connection"
                got += raw.frames.feed(data)
    return got


async def closed(raw: Raw) -> list[Frame | bytes]:
    """Everything ``raw`` receives until the emulator closes it (at most 5 s)."""
    got: list[Frame | bytes] = []
    try:
        async with asyncio.timeout(5):
            while data := await raw.reader.read(65536):
                got += raw.frames.feed(data)
    finally:
        raw.writer.close()
    return got


@pytest.fixture
async def hung_after(emulator: Emulator, data_dir: Path) -> AsyncIterator[None]:
    yield
    namespace_faults(data_dir, "--no-hang")  # a failed test leaves nothing hanging


@pytest.mark.usefixtures("hung_after")
async def test_connections_are_accepted_and_nothing_is_answered_until_cleared(
        emulator: Emulator, data_dir: Path) -> None:
    # Given a connection opened (with heartbeats every 0.2 s) before the hang
    before = await connect(emulator)
    await open_session(before, idle=400)
    # When the namespace hangs
    namespace_faults(data_dir, "--hang")
    # Then a new connection is accepted, and its protocol header is not answered
    during = await connect(emulator)
    during.writer.write(AMQP_HEADER)
    assert await unanswered(during, UNANSWERED) == []
    # And the old one answers nothing: no Begin, and its heartbeats stop (one may have
    # left before the emulator read the Begin that told it of the hang; ten would come)
    before.send(Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100),
                channel=2)
    got = await unanswered(before, UNANSWERED)
    assert all(isinstance(f, Frame) and f.body is None for f in got), got
    assert len(got) <= 1, got

    # When the hang is cleared, the stalled connections are closed: the one that had
    # opened with amqp:connection:forced, the one that never got an answer silently
    namespace_faults(data_dir, "--no-hang")
    bodies = [f.body for f in await closed(before) if isinstance(f, Frame) and f.body]
    assert len(bodies) == 1 and isinstance(bodies[0], Close), bodies
    assert isinstance(bodies[0].error, Error)
    assert bodies[0].error.condition == "amqp:connection:forced"
    assert "hung" in str(bodies[0].error.description)
    assert await closed(during) == []
    # And a new connection is answered again
    after = await connect(emulator)
    await open_session(after)
    after.writer.close()


#: azure-servicebus and azure-eventhub leak the socket of a connection whose open is
#: cancelled (their pyamqp transport's writer is dropped without close(); seen with a
#: traceback of where it was made: ``_transport_async.connect``), which a send on a new
#: connection and a management request (on a connection of its own) to a hung
#: namespace do when the test's deadline cancels them.
SDK_LEAK = "ignore:unclosed <StreamWriter:ResourceWarning"


@pytest.mark.usefixtures("hung_after")
@pytest.mark.filterwarnings(SDK_LEAK)
async def test_service_bus_sdk_hangs_and_then_works_again(conn_str: str, data_dir: Path) -> None:
    async with ServiceBusClient.from_connection_string(conn_str) as client:
        sender = client.get_queue_sender(QUEUE)
        receiver = client.get_queue_receiver(QUEUE)
        async with sender, receiver:
            await sender.send_messages(ServiceBusMessage("before"))
            # When the namespace hangs, a send on an open connection does not complete
            namespace_faults(data_dir, "--hang")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sender.send_messages(ServiceBusMessage("hung")),
                                       UNANSWERED)
            # Nor does one on a new connection
            async with ServiceBusClient.from_connection_string(conn_str) as other:

                async def send_on_a_new_connection() -> None:
                    async with other.get_queue_sender(QUEUE) as new_sender:
                        await new_sender.send_messages(ServiceBusMessage("hung, new"))

                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(send_on_a_new_connection(), UNANSWERED)
            # And a receiver gets nothing, although a message waits
            with contextlib.suppress(TimeoutError):
                got = await asyncio.wait_for(receiver.receive_messages(max_wait_time=1),
                                             UNANSWERED)
                assert got == []
            # When the hang is cleared
            namespace_faults(data_dir, "--no-hang")
            # Then the same sender works again (the SDK reconnects), and a new client too
            await sender.send_messages(ServiceBusMessage("after"))
        async with client.get_queue_sender(QUEUE) as sender:
            await sender.send_messages(ServiceBusMessage("after, new"))
    # And nothing sent while hung was stored, and no message was taken meanwhile: the
    # waiting one is there at once, not after its lock expired
    async with LocalTransport("primary", data_dir=data_dir) as local:
        bodies = [r.body for r in await local.receive(QUEUE, max_messages=10)]
    assert bodies == [b"before", b"after", b"after, new"]


@pytest.mark.usefixtures("hung_after")
@pytest.mark.filterwarnings(SDK_LEAK)
async def test_event_hubs_sdk_hangs_and_then_works_again(conn_str: str, data_dir: Path) -> None:
    async with EventHubProducerClient.from_connection_string(
            conn_str, eventhub_name=HUB) as producer:
        await producer.send_batch([EventData("before")], partition_id="0")
        # When the namespace hangs, neither a send nor a management request completes
        namespace_faults(data_dir, "--hang")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                producer.send_batch([EventData("hung")], partition_id="0"), UNANSWERED)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(producer.get_partition_ids(), UNANSWERED)
        # When the hang is cleared, the same producer works again
        namespace_faults(data_dir, "--no-hang")
        await producer.send_batch([EventData("after")], partition_id="0")
        assert await producer.get_partition_ids() == ["0", "1", "2", "3"]
    # And what was sent while hung was never stored
    async with LocalTransport("primary", data_dir=data_dir) as local:
        events = await local.read_partition(HUB, "0", position=EventPosition.earliest())
    assert [e.message.body for e in events] == [b"before", b"after"]


@pytest.mark.usefixtures("hung_after")
async def test_down_while_hung_refuses_and_up_clears_both(
        emulator: Emulator, data_dir: Path) -> None:
    # Given a hung namespace with a stalled connection
    namespace_faults(data_dir, "--hang")
    stalled = await connect(emulator)
    stalled.writer.write(AMQP_HEADER)
    # When it goes down, the stalled connection is closed and new ones are refused
    assert main(["namespace", "down", "primary", "--data-dir", str(data_dir)]) == 0
    await closed(stalled)
    with pytest.raises(OSError):
        async with asyncio.timeout(5):
            while True:  # the emulator applies "down" within its poll interval
                _, writer = await asyncio.open_connection("127.0.0.1", emulator.port("primary"))
                writer.close()
                await asyncio.sleep(0.05)
    # When it comes up, it is not hung either: connections are answered
    assert main(["namespace", "up", "primary", "--data-dir", str(data_dir)]) == 0
    async with asyncio.timeout(5):
        while True:
            try:
                raw = await connect(emulator)
                break
            except OSError:
                await asyncio.sleep(0.05)
    await open_session(raw)
    raw.writer.close()
