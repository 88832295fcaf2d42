"""EventHubsTransport: error mapping, batching, pull-style partition reads, outages;
end to end on the emulator."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import logging
import socket
import time
import traceback
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
)
from azure.eventhub import EventDataBatch
from azure.eventhub._pyamqp import error as amqp_errors
from azure.eventhub._pyamqp.error import (
    AMQPConnectionError,
    AMQPLinkError,
    AuthenticationException,
    ErrorCondition,
    MessageException,
)
from azure.eventhub._transport import _pyamqp_transport
from azure.eventhub.exceptions import (
    AuthenticationError,
    ClientClosedError,
    ConnectError,
    ConnectionLostError,
    EventDataError,
    EventDataSendError,
    EventHubError,
    OperationTimeoutError,
    OwnershipLostError,
)

from gateway.emulator import Emulator
from gateway.transports import EventPosition, LocalNamespace, ReceivedMessage
from gateway.transports.eventhubs import EventHubsOptions, EventHubsTransport
from gateway.transports.eventhubs._errors import map_error as _map
from gateway.transports.eventhubs._sending import _batches
from gateway.transports.sdk._convert import parse_offset, starting_position
from replication import (
    ConfigError,
    GatewayError,
    Message,
    MessageRejected,
    MessageTooLarge,
    NamespaceMisconfigured,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    TransportError,
)

pytestmark = pytest.mark.anyio

KEY = "ZXZlbnQtaHVicy1zZWNyZXQta2V5LWRvLW5vdC1sZWFr"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _down_connection_string() -> str:
    # The emulator form (no TLS, port kept) on a port nobody listens on: refused at once.
    return (f"Endpoint=sb://127.0.0.1:{_closed_port()};SharedAccessKeyName=Root;"
            f"SharedAccessKey={KEY};UseDevelopmentEmulator=true")


def _raised_while(inner: BaseException, outer: BaseException) -> BaseException:
    # The SDK raises its errors while handling the AMQP one (``raise ... from None``).
    try:
        try:
            raise inner
        except BaseException:
            raise outer from None
    except BaseException as exc:
        return exc


def _refused_connect() -> Exception:
    # As the SDK raises it: ConnectError from AMQPConnectionError from the refused socket.
    amqp = AMQPConnectionError(ErrorCondition.SocketError, description="Connect call failed")
    amqp.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    error = _sdk(amqp)
    error.__cause__ = amqp
    return error


# The SDK's private AMQP layer is untyped; tests use it to build errors as the SDK does.
PyamqpTransport: Any = _pyamqp_transport.PyamqpTransport
TokenAuthFailure: Any = amqp_errors.TokenAuthFailure


def _sdk(amqp_error: Exception) -> Exception:
    # The SDK's own conversion of an AMQP-level error into its public exception.
    error: Exception = PyamqpTransport._create_eventhub_exception(amqp_error)
    return error


def _mgmt(status: int) -> Exception:
    # How a management request's status code reaches the caller.
    return _sdk(PyamqpTransport.get_error(status, "the reason"))


def _send_refused(condition: bytes, description: str) -> EventDataSendError:
    # As the SDK builds it: the AMQP error goes in as the details.
    details: Any = MessageException(condition, description=description)
    return EventDataSendError("refused", details)


def _http_error(status: int) -> HttpResponseError:
    error = HttpResponseError(message=f"HTTP {status}")
    error.status_code = status
    return error


UNAVAILABLE, TIMEOUT, REFUSED, STOLEN = (
    "the namespace is unavailable", "timed out", "refused for good", "higher owner level")
#: A namespace that refuses the credentials is unusable (not the message).
CREDENTIALS = "refused the credentials"

CASES: list[tuple[str, Callable[[], BaseException], type[GatewayError], str]] = [
    ("link stolen", lambda: _sdk(AMQPLinkError(
        ErrorCondition.LinkStolen, description="New receiver with higher epoch of '2' is "
        "created hence current receiver with epoch '1' is getting disconnected.")),
     OwnershipLost, STOLEN),
    ("epoch message", lambda: ConnectError("Receiver with a lower epoch '1' cannot be "
                                           "created: epoch '2' exists"), OwnershipLost, STOLEN),
    ("checkpoint ownership lost", lambda: OwnershipLostError(), OwnershipLost, STOLEN),
    ("send timeout", lambda: OperationTimeoutError("Send operation timed out"),
     OperationTimeout, TIMEOUT),
    ("event data refused", lambda: EventDataError("bad event"), MessageRejected, REFUSED),
    ("auth: token refused", lambda: _sdk(TokenAuthFailure(401, b"InvalidSignature")),
     NamespaceMisconfigured, CREDENTIALS),
    ("auth: management 401", lambda: _mgmt(401), NamespaceMisconfigured, CREDENTIALS),
    ("auth: credential refused", lambda: _raised_while(
        ClientAuthenticationError("bad secret"), AuthenticationError("token")),
     NamespaceMisconfigured, CREDENTIALS),
    ("auth: token timeout", lambda: _sdk(AuthenticationException(
        ErrorCondition.InternalError, description="Authorization timeout.")),
     NamespaceUnavailable, UNAVAILABLE),
    ("management 404: no such event hub", lambda: _mgmt(404), MessageRejected, REFUSED),
    ("management 503", lambda: _mgmt(503), NamespaceUnavailable, UNAVAILABLE),
    ("management 408", lambda: _mgmt(408), OperationTimeout, TIMEOUT),
    ("link not found", lambda: _sdk(AMQPLinkError(
        ErrorCondition.NotFound, description="The messaging entity could not be found")),
     MessageRejected, REFUSED),
    ("argument out of range", lambda: _sdk(AMQPLinkError(
        b"com.microsoft:argument-out-of-range", description="partition 9")),
     MessageRejected, REFUSED),
    ("vendor timeout", lambda: _sdk(AMQPLinkError(
        b"com.microsoft:timeout", description="slow")), OperationTimeout, TIMEOUT),
    ("link detach forced", lambda: _sdk(AMQPLinkError(
        ErrorCondition.LinkDetachForced, description="idle")), NamespaceUnavailable,
     UNAVAILABLE),
    ("socket error", lambda: _sdk(AMQPConnectionError(
        ErrorCondition.SocketError, description="Connect call failed")),
     NamespaceUnavailable, UNAVAILABLE),
    # A refused connection is final for the send: the sender fails over without a retry.
    ("connection refused", _refused_connect, NamespaceRefused, "refused the connection"),
    ("builtin: connection refused", lambda: ConnectionRefusedError(111, "refused"),
     NamespaceRefused, "refused the connection"),
    ("connection lost, timeout inside", lambda: _sdk(TimeoutError("read timed out")),
     NamespaceUnavailable, UNAVAILABLE),
    ("send refused: too large", lambda: _send_refused(
        ErrorCondition.LinkMessageSizeExceeded, "too large"), MessageTooLarge, REFUSED),
    ("send refused: server busy", lambda: _send_refused(
        b"com.microsoft:server-busy", "busy"), NamespaceUnavailable, UNAVAILABLE),
    ("send refused: quota", lambda: _send_refused(
        ErrorCondition.ResourceLimitExceeded, "throttled"), NamespaceUnavailable, UNAVAILABLE),
    ("client closed", lambda: ClientClosedError("closed"), NamespaceUnavailable, UNAVAILABLE),
    ("plain connection lost", lambda: ConnectionLostError("lost"), NamespaceUnavailable,
     UNAVAILABLE),
    ("generic wrapping a credential error", lambda: _raised_while(
        ClientAuthenticationError("no identity"), EventHubError("token")), NamespaceMisconfigured,
     CREDENTIALS),
    ("generic wrapping an unreachable token endpoint", lambda: _raised_while(
        ServiceRequestError("no route"), EventHubError("token")), NamespaceUnavailable,
     UNAVAILABLE),
    ("generic, nothing known", lambda: EventHubError("odd"), NamespaceUnavailable,
     UNAVAILABLE),
    ("core: credential", lambda: ClientAuthenticationError("AADSTS"), NamespaceMisconfigured,
     CREDENTIALS),
    ("core: unreachable", lambda: ServiceRequestError("no route"), NamespaceUnavailable,
     UNAVAILABLE),
    ("core: 403", lambda: _http_error(403), NamespaceMisconfigured, CREDENTIALS),
    ("core: 429", lambda: _http_error(429), NamespaceUnavailable, UNAVAILABLE),
    ("builtin: timeout", lambda: TimeoutError(), OperationTimeout, TIMEOUT),
    ("builtin: socket", lambda: ConnectionResetError(104, "reset"), NamespaceUnavailable,
     UNAVAILABLE),
    ("builtin: validation (wrong partition id)", lambda: ValueError(
        "Wrong partition id:9. The eventhub has partitions: ['0', '1']."), MessageRejected,
     REFUSED),
    ("builtin: anything else", lambda: KeyError("x"), NamespaceUnavailable, UNAVAILABLE),
]


@pytest.mark.parametrize(("make", "expected", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_error_mapping(make: Callable[[], BaseException], expected: type[GatewayError],
                       words: str) -> None:
    # Given an SDK exception / When it crosses the boundary
    sdk_error = make()
    mapped = _map(sdk_error, "primary", action="read partition 0 of 'hub'")
    # Then it is exactly the expected class, with a useful one-line message
    assert type(mapped) is expected
    text = str(mapped)
    assert words in text
    assert "read partition 0 of 'hub'" in text and "'primary'" in text
    assert type(sdk_error).__name__ in text
    assert "\n" not in text and len(text) < 600
    if isinstance(mapped, TransportError):
        assert mapped.namespace == "primary"


# -- options, positions, offsets -----------------------------------------------------------


def test_options() -> None:
    opts = EventHubsOptions()
    assert (opts.retry_total, opts.operation_timeout, opts.prefetch, opts.buffer_size) == (
        0, 2.0, 300, 1000)
    for bad in ({"prefetch": 0}, {"buffer_size": "9"}, {"owner_level": 1}):
        with pytest.raises(ConfigError):
            EventHubsTransport.from_connection_string(_down_connection_string(), **bad)


def test_malformed_connection_string_is_refused_without_quoting_it() -> None:
    with pytest.raises(ConfigError) as info:
        EventHubsTransport.from_connection_string(f"Endpoint=sb://h/;SharedAccessKey={KEY}")
    assert KEY not in str(info.value)


@pytest.mark.parametrize(("position", "expected"), [
    (EventPosition.earliest(), ("-1", False)),
    (EventPosition(), ("-1", False)),
    (EventPosition(latest=True), ("@latest", False)),
    (EventPosition(sequence_number=5), (5, False)),
    (EventPosition(sequence_number=5, inclusive=True), (5, True)),
    (EventPosition(sequence_number=0, inclusive=True), (0, True)),
    (EventPosition(offset=1024), ("1024", False)),
    (EventPosition(offset=0, inclusive=True), ("0", True)),
    (EventPosition(enqueued_time=86400.5),
     (dt.datetime(1970, 1, 2, 0, 0, 0, 500000, tzinfo=dt.timezone.utc), False)),
])
def test_starting_positions(position: EventPosition, expected: tuple[Any, bool]) -> None:
    assert starting_position(position) == expected


def test_offsets_parse_as_ints_or_minus_one() -> None:
    assert [parse_offset(v) for v in ("4096", "-1", b"12", 7, "1:2:3", None, "")] == [
        4096, -1, 12, 7, -1, -1, -1]


# -- batching (a stand-in producer with the SDK's real batches) ------------------------------


@dataclass
class FakeProducer:
    max_size: int = 1_000
    sent: list[EventDataBatch] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    fail_on: dict[int, Exception] = field(default_factory=dict)

    async def create_batch(self, *, partition_key: str | None = None) -> EventDataBatch:
        self.keys.append(partition_key)
        return EventDataBatch(max_size_in_bytes=self.max_size, partition_key=partition_key)

    async def send_batch(self, batch: EventDataBatch, *, timeout: float | None = None) -> None:
        failure = self.fail_on.get(len(self.sent))
        self.sent.append(batch)
        if failure is not None:
            raise failure

    async def close(self) -> None:
        pass


async def test_batches_one_key_each_in_order_and_split_by_size() -> None:
    producer = FakeProducer(max_size=1_000)
    messages = [Message(b"a" * 300, partition_key="k1"), Message(b"b"),
                Message(b"c" * 300, partition_key="k1"), Message(b"d", partition_key="k2"),
                Message(b"e" * 300, partition_key="k1")]
    batches = await _batches(producer, messages, "send")  # type: ignore[arg-type]
    # k1 needs two batches (3 x 300 bytes and overhead > 1000), then None, then k2
    assert [len(b) for b, _ in batches] == [2, 1, 1, 1]
    assert [held for _, held in batches] == [[0, 2], [4], [1], [3]]
    assert producer.keys == ["k1", "k1", None, "k2"]


async def test_send_splits_refuses_too_large_and_reports_partial_failure() -> None:
    async with EventHubsTransport.from_connection_string(_down_connection_string(),
                                                         name="primary") as transport:
        producer = FakeProducer(max_size=1_000)
        transport._producers["hub"] = producer  # type: ignore[assignment]
        # Given messages that need three batches, When all are sent, Then three batches go
        await transport.send("hub", [Message(b"x" * 400) for _ in range(5)])
        assert [len(b) for b in producer.sent] == [2, 2, 1]
        # A message too large on its own: nothing is sent, and it is named
        producer.sent.clear()
        with pytest.raises(MessageTooLarge, match="refused for good") as caught:
            await transport.send("hub", [Message(b"ok"), Message(b"x" * 2_000, message_id="big")])
        assert producer.sent == []
        assert (caught.value.sent, caught.value.message_id) == (0, "big")
        # A later batch refused for size: the messages, from the first, that landed
        # (batches go per key: [0, 2] and [3] for k, then [1] without a key)
        producer.sent.clear()
        producer.fail_on = {2: _send_refused(ErrorCondition.LinkMessageSizeExceeded, "big")}
        with pytest.raises(MessageTooLarge, match="batch 3 of 3") as caught:
            await transport.send("hub", [
                Message(b"x" * 300, partition_key="k"), Message(b"y" * 300),
                Message(b"x" * 300, partition_key="k"), Message(b"x" * 300, partition_key="k")])
        assert caught.value.sent == 1  # 0, 2 and 3 landed (key k); 1 did not
        producer.fail_on = {}
        producer.sent.clear()
        # The first batch failing: nothing landed, the outage is reported as it is
        producer.fail_on = {0: ConnectError("down")}
        with pytest.raises(NamespaceUnavailable):
            await transport.send("hub", [Message(b"x" * 400) for _ in range(3)])
        # A later batch failing: earlier ones landed, so the outcome is unknown
        producer.sent.clear()
        producer.fail_on = {1: ConnectError("down")}
        with pytest.raises(OperationTimeout, match="after 1 of 2 batches landed"):
            await transport.send("hub", [Message(b"x" * 400) for _ in range(3)])


# -- pull-style reads (a stand-in consumer client driving the real callbacks) ----------------


@dataclass
class FakeEvent:
    sequence_number: int
    body: bytes = b"e"
    message_id: str | None = None
    partition_key: bytes | None = None
    properties: dict[Any, Any] = field(default_factory=dict)
    offset: str | None = None
    enqueued_time: dt.datetime = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

    def __post_init__(self) -> None:
        if self.offset is None:
            self.offset = str(self.sequence_number * 100)


class FakeConsumer:
    """Stands in for EventHubConsumerClient: receive_batch pushes what the test feeds."""

    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}
        self.feed: asyncio.Queue[list[FakeEvent] | Exception] = asyncio.Queue()
        self.delivered = 0
        self.closed = False

    async def receive_batch(self, on_event_batch: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
        await kwargs["on_partition_initialize"](None)  # as the SDK does, before receiving
        while True:
            item = await self.feed.get()
            if isinstance(item, Exception):
                await kwargs["on_error"](None, item)
                await asyncio.sleep(3600)  # the SDK would wait, then restart
            else:
                await on_event_batch(None, item)
                self.delivered += len(item)

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
async def reading() -> AsyncIterator[tuple[EventHubsTransport, list[FakeConsumer]]]:
    consumers: list[FakeConsumer] = []

    def new_consumer(entity: str, group: str) -> FakeConsumer:
        consumers.append(FakeConsumer())
        return consumers[-1]

    async with EventHubsTransport.from_connection_string(
            _down_connection_string(), name="primary", buffer_size=4,
            idle_check_interval=0.2) as transport:
        transport._new_consumer = new_consumer  # type: ignore[assignment]
        yield transport, consumers
        await transport.aclose()
        assert all(c.closed for c in consumers)


async def test_reads_continue_on_one_receive(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    # Given a read from the start with an owner level
    first = transport.read_partition("hub", "1", position=EventPosition.earliest(),
                                     max_events=2, max_wait=5, owner_level=3)
    task = asyncio.ensure_future(first)
    await asyncio.sleep(0.01)
    [consumer] = consumers
    consumer.feed.put_nowait([FakeEvent(0, message_id="m0", partition_key=b"k",
                                        properties={b"n": 1}), FakeEvent(1), FakeEvent(2)])
    events = await task
    # Then the SDK was asked for that partition and position, and events came back in order
    assert consumer.kwargs["partition_id"] == "1"
    assert (consumer.kwargs["starting_position"], consumer.kwargs["owner_level"]) == ("-1", 3)
    assert [e.sequence_number for e in events] == [0, 1]
    assert events[0].message.message_id == "m0" and events[0].message.partition_key == "k"
    assert dict(events[0].message.properties) == {"n": 1}
    assert events[1].message.message_id == "eh-1-1"  # no id from the producer: stable one
    assert (events[1].offset, events[1].namespace, events[1].partition_id) == (100, "primary",
                                                                               "1")
    # When the next reads continue where the last left off (three spellings of it)
    again = await transport.read_partition("hub", "1", position=EventPosition(sequence_number=1),
                                           max_wait=0, owner_level=3)
    consumer.feed.put_nowait([FakeEvent(3), FakeEvent(4)])
    more = await transport.read_partition(
        "hub", "1", position=EventPosition(sequence_number=3, inclusive=True), max_wait=5,
        owner_level=3)
    consumer.feed.put_nowait([FakeEvent(5)])
    last = await transport.read_partition("hub", "1", position=EventPosition(offset=400),
                                          max_wait=5, owner_level=3)
    # Then they share the one background receive
    assert [e.sequence_number for e in again + more + last] == [2, 3, 4, 5]
    assert len(consumers) == 1


async def test_another_position_or_owner_level_restarts_the_receive(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    assert await transport.read_partition("hub", "0", position=EventPosition(latest=True)) == []
    await asyncio.sleep(0.01)
    assert consumers[0].kwargs["starting_position"] == "@latest"
    # The same position again keeps the receive (nothing returned yet)
    await transport.read_partition("hub", "0", position=EventPosition(latest=True))
    assert len(consumers) == 1
    # Another position restarts it there (the old one stops in the background)
    await transport.read_partition("hub", "0", position=EventPosition(sequence_number=7,
                                                                     inclusive=True))
    await asyncio.sleep(0.01)
    assert consumers[0].closed and len(consumers) == 2
    assert (consumers[1].kwargs["starting_position"],
            consumers[1].kwargs["starting_position_inclusive"]) == (7, True)
    # Another owner level too
    await transport.read_partition("hub", "0", position=EventPosition(sequence_number=7,
                                                                     inclusive=True),
                                   owner_level=1)
    await asyncio.sleep(0.01)
    assert consumers[1].closed and len(consumers) == 3


async def test_an_error_comes_after_the_events_buffered_before_it(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    await transport.read_partition("hub", "0", position=EventPosition.earliest())
    await asyncio.sleep(0.01)
    consumers[0].feed.put_nowait([FakeEvent(0), FakeEvent(1)])
    consumers[0].feed.put_nowait(_sdk(AMQPConnectionError(ErrorCondition.SocketError,
                                                          description="reset")))
    await asyncio.sleep(0.05)
    # The events first
    events = await transport.read_partition("hub", "0", position=EventPosition.earliest())
    assert [e.sequence_number for e in events] == [0, 1]
    # Then the outage, never an empty list
    with pytest.raises(NamespaceUnavailable, match="read partition 0 of 'hub'"):
        await transport.read_partition("hub", "0", position=EventPosition(sequence_number=1))
    await asyncio.sleep(0.01)
    assert consumers[0].closed
    # The next read starts a new receive where the caller asks
    await transport.read_partition("hub", "0", position=EventPosition(sequence_number=1))
    await asyncio.sleep(0.01)
    assert consumers[1].kwargs["starting_position"] == 1


async def test_a_higher_owner_level_takes_the_partition(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    read = asyncio.ensure_future(transport.read_partition(
        "hub", "0", position=EventPosition.earliest(), max_wait=5, owner_level=1))
    await asyncio.sleep(0.01)
    consumers[0].feed.put_nowait(_sdk(AMQPLinkError(
        ErrorCondition.LinkStolen, description="New receiver with higher epoch of '2'")))
    with pytest.raises(OwnershipLost):
        await read


async def test_the_buffer_holds_back_the_sdk(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading  # buffer_size=4
    await transport.read_partition("hub", "0", position=EventPosition.earliest())
    await asyncio.sleep(0.01)
    consumer = consumers[0]
    for seq in range(0, 8, 2):
        consumer.feed.put_nowait([FakeEvent(seq), FakeEvent(seq + 1)])
    await asyncio.sleep(0.05)
    # Two batches fill the buffer; the third waits in the SDK callback
    assert consumer.delivered == 4
    got = await transport.read_partition("hub", "0", position=EventPosition.earliest(),
                                         max_events=3)
    await asyncio.sleep(0.05)
    assert [e.sequence_number for e in got] == [0, 1, 2]
    assert consumer.delivered == 8
    rest = await transport.read_partition("hub", "0", position=EventPosition(sequence_number=2),
                                          max_events=10)
    assert [e.sequence_number for e in rest] == [3, 4, 5, 6, 7]


async def test_a_silent_outage_is_noticed_by_asking_the_namespace(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    producer = FakeProducer()
    transport._producers["hub"] = producer  # type: ignore[assignment]
    asked: list[str] = []
    answer: list[Exception] = []

    async def properties(partition_id: str) -> dict[str, Any]:
        asked.append(partition_id)
        if answer:
            raise answer[0]
        return {"id": partition_id}

    producer.get_partition_properties = properties  # type: ignore[attr-defined]
    # Given a reader that hears nothing (the SDK retrying a lost connection says nothing)
    # When reads find nothing for longer than idle_check_interval (0.2 s here)
    started = time.monotonic()
    assert await transport.read_partition("hub", "2", position=EventPosition.earliest(),
                                          max_wait=0.5) == []
    # Then the namespace was asked, answered, and the receive was kept
    assert asked and asked[0] == "2" and len(consumers) == 1
    # And when it does not answer, the read raises the outage well before max_wait
    answer.append(ConnectError("Connect call failed"))
    with pytest.raises(NamespaceUnavailable, match="read partition 2 of 'hub'"):
        await transport.read_partition("hub", "2", position=EventPosition.earliest(),
                                       max_wait=30)
    assert time.monotonic() - started < 2
    await asyncio.sleep(0.01)
    assert consumers[0].closed


async def test_events_delivered_again_are_dropped(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, consumers = reading
    await transport.read_partition("hub", "0", position=EventPosition.earliest())
    await asyncio.sleep(0.01)
    # The SDK reconnected silently and started over
    consumers[0].feed.put_nowait([FakeEvent(0), FakeEvent(1)])
    consumers[0].feed.put_nowait([FakeEvent(0), FakeEvent(1), FakeEvent(2)])
    await asyncio.sleep(0.05)
    got = await transport.read_partition("hub", "0", position=EventPosition.earliest(),
                                         max_events=10)
    assert [e.sequence_number for e in got] == [0, 1, 2]


async def test_max_wait_zero_returns_what_is_buffered(
        reading: tuple[EventHubsTransport, list[FakeConsumer]]) -> None:
    transport, _ = reading
    started = time.monotonic()
    assert await transport.read_partition("hub", "0", position=EventPosition.earliest()) == []
    assert time.monotonic() - started < 0.5
    with pytest.raises(ConfigError):
        await transport.read_partition("hub", "0", position=EventPosition.earliest(),
                                       max_events=0)


# -- without a namespace: outages, wrong kinds of operation, secrets ----------------------


@pytest.fixture
async def down() -> AsyncIterator[EventHubsTransport]:
    async with EventHubsTransport.from_connection_string(_down_connection_string(),
                                                         name="primary") as transport:
        yield transport


@pytest.mark.parametrize("operation", ["send", "get_partition_ids", "read_partition", "probe"])
async def test_namespace_down_raises_namespace_unavailable_fast(
        down: EventHubsTransport, operation: str) -> None:
    started = time.monotonic()
    with pytest.raises(NamespaceUnavailable) as info:
        if operation == "send":
            await down.send("hub", [Message(b"a")])
        elif operation == "get_partition_ids":
            await down.get_partition_ids("hub")
        elif operation == "read_partition":
            await down.read_partition("hub", "0", position=EventPosition.earliest(), max_wait=5)
        else:
            await down.probe()
    assert time.monotonic() - started < 2.5
    assert info.value.namespace == "primary"


async def test_queue_operations_are_refused(down: EventHubsTransport) -> None:
    received = ReceivedMessage(message=Message(b"a"), namespace="primary", entity="hub",
                               lock_token="t", sequence_number=1, delivery_count=1,
                               enqueued_time=0.0, locked_until=None)
    with pytest.raises(MessageRejected, match="event hubs have no queues: use ServiceBusTransport"):
        await down.receive("hub")
    for settle in (down.complete, down.abandon):
        with pytest.raises(MessageRejected, match="event hubs have no queues"):
            await settle(received)
    with pytest.raises(MessageRejected, match="event hubs have no queues"):
        await down.dead_letter(received, reason="bad")


async def test_no_key_leaks_in_errors_reprs_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[BaseException] = []
    async with EventHubsTransport.from_connection_string(_down_connection_string(),
                                                         name="primary") as transport:
        for attempt in (lambda: transport.send("hub", [Message(b"a")]),
                        lambda: transport.get_partition_ids("hub"),
                        lambda: transport.read_partition(
                            "hub", "0", position=EventPosition.earliest(), max_wait=5),
                        transport.probe):
            with pytest.raises(GatewayError) as info:
                await attempt()
            errors.append(info.value)
        text = repr(transport)
    assert len(errors) == 4
    for error in errors:
        text += "".join(traceback.format_exception(error)) + repr(error)
    assert KEY not in text + caplog.text


async def test_aclose_is_idempotent(down: EventHubsTransport) -> None:
    with pytest.raises(NamespaceUnavailable):
        await down.get_partition_ids("hub")
    await down.aclose()
    await down.aclose()
    with pytest.raises(NamespaceUnavailable):
        await down.get_partition_ids("hub")


# -- end to end, on the namespace emulator ------------------------------------------------

HUB = "telemetry"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Any]:
    async with Emulator({"primary": 0}, data_dir=tmp_path, event_hubs={HUB: 4}) as emu:
        yield emu


@pytest.fixture
async def eh(emulator: Any) -> AsyncIterator[EventHubsTransport]:
    async with EventHubsTransport.from_connection_string(
            emulator.connection_string("primary"), name="primary") as transport:
        yield transport


async def _read(transport: EventHubsTransport, partition_id: str, position: EventPosition,
                *, expect: int, **kwargs: Any) -> list[Any]:
    """Read from ``position`` until ``expect`` events came (or 5 s passed)."""
    events: list[Any] = []
    deadline = time.monotonic() + 5
    while len(events) < expect and time.monotonic() < deadline:
        events += await transport.read_partition(HUB, partition_id, position=position,
                                                 max_wait=0.5, **kwargs)
        if events:
            position = EventPosition(sequence_number=events[-1].sequence_number)
    return events


async def _partition_of(transport: EventHubsTransport, key: str, data_dir: Path) -> str:
    """Send one event with ``key`` and return the partition it landed in (an empty hub)."""
    await transport.send(HUB, [Message(b"probe", partition_key=key, message_id="where")])
    with LocalNamespace("primary", data_dir=data_dir) as namespace:
        [pid] = [p.partition_id for p in namespace.partition_info(HUB)
                 if p.last_sequence_number is not None]
    return pid


async def test_send_and_read_every_partition(eh: EventHubsTransport) -> None:
    # Given keyed events (one key) and round-robin events
    assert await eh.get_partition_ids(HUB) == ["0", "1", "2", "3"]
    keyed = [Message(f"k{i}".encode(), message_id=f"k{i}", partition_key="device-1",
                     properties={"n": i, "big": 2**40, "f": 0.5, "ok": True, "z": None})
             for i in range(3)]
    loose = [Message(b"r", message_id=f"r{i}") for i in range(4)]
    # When they are sent in one call
    await eh.send(HUB, [keyed[0], loose[0], keyed[1], *loose[1:], keyed[2]])
    # Then every event is in some partition, the keyed ones together and in order
    found: dict[str, Any] = {}
    for pid in await eh.get_partition_ids(HUB):
        for event in await _read(eh, pid, EventPosition.earliest(), expect=1):
            found[event.message.message_id] = event
    found.update({e.message.message_id: e for e in await _read(
        eh, found["k0"].partition_id, EventPosition.earliest(), expect=3)})
    assert set(found) == {"k0", "k1", "k2", "r0", "r1", "r2", "r3"}
    together = [found[f"k{i}"] for i in range(3)]
    assert len({e.partition_id for e in together}) == 1
    assert [e.sequence_number for e in together] == sorted(e.sequence_number for e in together)
    assert together[0].message.partition_key == "device-1"
    assert dict(together[1].message.properties) == dict(keyed[1].properties)
    assert together[0].message.body == b"k0" and together[0].namespace == "primary"
    assert together[0].offset >= 0 and together[0].enqueued_time > time.time() - 60


async def test_read_from_each_kind_of_position(eh: EventHubsTransport, tmp_path: Path) -> None:
    # Given five events in one partition, sent apart so their enqueued times differ
    pid = await _partition_of(eh, "p", tmp_path)
    for i in range(4):
        await eh.send(HUB, [Message(f"e{i}".encode(), message_id=f"e{i}", partition_key="p")])
        await asyncio.sleep(0.02)
    events = await _read(eh, pid, EventPosition.earliest(), expect=5)
    assert [e.message.message_id for e in events] == ["where", "e0", "e1", "e2", "e3"]
    second = events[2]

    async def ids(position: EventPosition, expect: int) -> list[str]:
        return [e.message.message_id for e in await _read(eh, pid, position, expect=expect)]

    # Then each position reads from where it says
    assert await ids(EventPosition(sequence_number=second.sequence_number), 2) == ["e2", "e3"]
    assert await ids(EventPosition(sequence_number=second.sequence_number, inclusive=True),
                     3) == ["e1", "e2", "e3"]
    assert await ids(EventPosition(offset=second.offset), 2) == ["e2", "e3"]
    assert await ids(EventPosition(offset=second.offset, inclusive=True), 3) == [
        "e1", "e2", "e3"]
    # (between two events: the emulator's enqueued times are exact only to the millisecond)
    between = (events[1].enqueued_time + second.enqueued_time) / 2
    assert await ids(EventPosition(enqueued_time=between), 3) == ["e1", "e2", "e3"]
    # And "latest" reads only what is sent after the read started
    assert await eh.read_partition(HUB, pid, position=EventPosition(latest=True),
                                   max_wait=1.5) == []
    await eh.send(HUB, [Message(b"new", message_id="new", partition_key="p")])
    assert await ids(EventPosition(latest=True), 1) == ["new"]


async def test_owner_level_takeover_end_to_end(emulator: Any, eh: EventHubsTransport,
                                              tmp_path: Path) -> None:
    pid = await _partition_of(eh, "owned", tmp_path)
    async with EventHubsTransport.from_connection_string(
            emulator.connection_string("primary"), name="primary") as other:
        # Given a reader with owner level 1
        mine = await _read(eh, pid, EventPosition.earliest(), expect=1, owner_level=1)
        assert [e.message.message_id for e in mine] == ["where"]
        # When another reader comes with owner level 2
        theirs = await _read(other, pid, EventPosition.earliest(), expect=1, owner_level=2)
        assert [e.message.message_id for e in theirs] == ["where"]
        # Then the first one's next read raises OwnershipLost, never an empty list
        with pytest.raises(OwnershipLost, match="higher owner level"):
            await eh.read_partition(HUB, pid, position=EventPosition(
                sequence_number=mine[-1].sequence_number), max_wait=3, owner_level=1)
        # And it cannot come back at its lower level
        with pytest.raises(OwnershipLost):
            await eh.read_partition(HUB, pid, position=EventPosition.earliest(), max_wait=3,
                                    owner_level=1)


async def test_unknown_event_hubs_are_rejected(eh: EventHubsTransport) -> None:
    with pytest.raises(MessageRejected, match="refused for good"):
        await eh.get_partition_ids("nosuch")
    with pytest.raises(MessageRejected, match="refused for good"):
        await eh.send("nosuch", [Message(b"a")])
    await eh.probe()  # the namespace answers, even about an unknown event hub


async def test_probe_and_outage(eh: EventHubsTransport, tmp_path: Path) -> None:
    # Given a namespace that answers and a partition being read
    pid = await _partition_of(eh, "x", tmp_path)
    events = await _read(eh, pid, EventPosition.earliest(), expect=1)
    await eh.probe()
    control = LocalNamespace("primary", data_dir=tmp_path)
    try:
        # When it is taken down
        control.down()
        await asyncio.sleep(0.3)
        # Then every operation reports the outage within a second or two
        after = EventPosition(sequence_number=events[-1].sequence_number)
        for attempt in (lambda: eh.send(HUB, [Message(b"during")]),
                        lambda: eh.get_partition_ids(HUB), eh.probe,
                        lambda: eh.read_partition(HUB, pid, position=after, max_wait=3)):
            started = time.monotonic()
            with pytest.raises(NamespaceUnavailable) as info:
                await attempt()
            assert time.monotonic() - started < 2.5
            assert info.value.namespace == "primary"
        # And once it is back, reading resumes where it stopped
        control.up()
        deadline = time.monotonic() + 10
        while True:
            try:
                await eh.probe()
                break
            except NamespaceUnavailable:
                assert time.monotonic() < deadline, "the namespace did not come back"
                await asyncio.sleep(0.2)
        await eh.send(HUB, [Message(b"after", message_id="after", partition_key="x")])
        assert [e.message.message_id for e in await _read(eh, pid, after, expect=1)] == ["after"]
    finally:
        control.up()
        control.close()


async def test_prepare_send_opens_a_producer_and_sends_nothing(
        eh: EventHubsTransport, down: EventHubsTransport, tmp_path: Path) -> None:
    # When a producer is prepared, Then nothing is sent to any partition
    await eh.prepare_send(HUB)
    with LocalNamespace("primary", data_dir=tmp_path) as namespace:
        assert [p.last_sequence_number for p in namespace.partition_info(HUB)] == [None] * 4
    # And an unknown hub, or a namespace that is down, fails as a send would
    with pytest.raises(MessageRejected):
        await eh.prepare_send("no-such-hub")
    with pytest.raises(NamespaceUnavailable):
        await down.prepare_send(HUB)


async def test_a_reader_stopped_while_the_sdk_connects_leaves_no_socket_open(
        emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a namespace slow to open the first connection of a partition receive (as a
    # loaded machine is): the SDK's start-up request for the partition ids
    from azure.eventhub._pyamqp.aio import _connection_async
    opened = asyncio.Event()
    original = _connection_async.Connection.open
    calls = 0

    async def slow_open(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        await original(self, *args, **kwargs)
        if calls == 1:
            opened.set()
            await asyncio.sleep(0.5)

    monkeypatch.setattr(_connection_async.Connection, "open", slow_open)
    # What earlier tests left to the collector is theirs: collect it before this check
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    transport = EventHubsTransport.from_connection_string(
        emulator.connection_string("primary"), name="primary")
    # When a read starts a receive and the transport is closed while that connection opens
    assert await transport.read_partition(HUB, "0", position=EventPosition.earliest(),
                                          max_wait=0) == []
    await asyncio.wait_for(opened.wait(), 5)
    await transport.aclose()
    # Then every connection the receive opened was closed, none left to the collector
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
