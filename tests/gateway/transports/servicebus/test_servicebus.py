"""ServiceBusTransport: error mapping, options, secrets, outages; end to end on the emulator."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.servicebus import ServiceBusMessageBatch
from azure.servicebus._pyamqp import error as amqp_errors
from azure.servicebus._pyamqp.error import (
    AMQPConnectionError,
    AMQPLinkError,
    AuthenticationException,
    ErrorCondition,
)
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import (
    AutoLockRenewFailed,
    AutoLockRenewTimeout,
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from gateway.emulator import Emulator, QueueSpec
from gateway.transports import EventPosition, LocalNamespace, ReceivedMessage, ReceiveMode
from gateway.transports.sdk._config import connection_string_parts
from gateway.transports.sdk._convert import body_bytes, properties_from
from gateway.transports.servicebus import ServiceBusOptions, ServiceBusTransport
from gateway.transports.servicebus._errors import map_error as _map
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
    SessionLockLost,
    TransportError,
)

pytestmark = pytest.mark.anyio

KEY = "c2VjcmV0LWtleS12YWx1ZS1kby1ub3QtbGVhaw=="
# The SDK's private AMQP layer is partly untyped; tests use it to build errors as the SDK does.
TokenAuthFailure: Any = amqp_errors.TokenAuthFailure
log = logging.getLogger("test")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _down_connection_string(key: str = KEY) -> str:
    # The emulator form (no TLS, port kept) on a port nobody listens on: refused at once.
    return (f"Endpoint=sb://127.0.0.1:{_closed_port()};SharedAccessKeyName=Root;"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true")


def _http_error(status: int) -> HttpResponseError:
    error = HttpResponseError(message=f"HTTP {status}")
    error.status_code = status
    return error


def _sdk(amqp_error: Exception) -> Exception:
    # The SDK's own conversion of an AMQP-level error into its public exception.
    return PyamqpTransport.create_servicebus_exception(log, amqp_error)


def _caused(error: Exception, cause: BaseException) -> Exception:
    # As the SDK raises it: ``raise AMQPConnectionError(...) from OSError(...)``.
    error.__cause__ = cause
    return error


UNAVAILABLE, TIMEOUT, REFUSED, LOCK_LOST = (
    "the namespace is unavailable", "timed out", "refused for good", "lock lost")
#: A namespace that refuses the credentials is unusable (not the message).
CREDENTIALS = "refused the credentials"

# (SDK exception factory, expected class, words in the message)
CASES: list[tuple[str, Callable[[], BaseException], type[GatewayError], str]] = [
    ("connection", lambda: ServiceBusConnectionError(message="link detached"),
     NamespaceUnavailable, UNAVAILABLE),
    ("communication", lambda: ServiceBusCommunicationError(message="host unreachable"),
     NamespaceUnavailable, UNAVAILABLE),
    ("server busy", lambda: ServiceBusServerBusyError(), NamespaceUnavailable, UNAVAILABLE),
    ("quota", lambda: ServiceBusQuotaExceededError(), NamespaceUnavailable, UNAVAILABLE),
    ("entity disabled", lambda: MessagingEntityDisabledError(), NamespaceUnavailable,
     UNAVAILABLE),
    ("auth: token refused", lambda: ServiceBusAuthenticationError(
        message=None, error=TokenAuthFailure(401, b"InvalidSignature"),
        condition=ErrorCondition.ClientError), NamespaceMisconfigured, CREDENTIALS),
    ("auth: unauthorized condition", lambda: ServiceBusAuthenticationError(
        message="no", condition=ErrorCondition.UnauthorizedAccess), NamespaceMisconfigured,
     CREDENTIALS),
    ("auth: credential refused", lambda: ServiceBusAuthenticationError(
        message="token", error=ClientAuthenticationError("bad secret")), NamespaceMisconfigured,
     CREDENTIALS),
    ("auth: token timeout", lambda: ServiceBusAuthenticationError(
        message="Authorization timeout.", error=AuthenticationException(
            ErrorCondition.InternalError, description="Authorization timeout."),
        condition=ErrorCondition.InternalError), NamespaceUnavailable, UNAVAILABLE),
    ("authorization", lambda: ServiceBusAuthorizationError(message="Unauthorized"),
     NamespaceMisconfigured, CREDENTIALS),
    ("operation timeout", lambda: OperationTimeoutError(message="Send timed out"),
     OperationTimeout, TIMEOUT),
    ("too large", lambda: MessageSizeExceededError(message="too big"), MessageTooLarge,
     REFUSED),
    ("entity not found", lambda: MessagingEntityNotFoundError(), MessageRejected, REFUSED),
    ("entity exists", lambda: MessagingEntityAlreadyExistsError(), MessageRejected, REFUSED),
    ("session cannot be locked", lambda: SessionCannotBeLockedError(), MessageRejected,
     REFUSED),
    ("message lock lost", lambda: MessageLockLostError(), MessageRejected, LOCK_LOST),
    ("session lock lost", lambda: SessionLockLostError(), SessionLockLost,
     "session's lock is lost"),
    ("message not found", lambda: MessageNotFoundError(), MessageRejected, LOCK_LOST),
    ("already settled", lambda: MessageAlreadySettled(action="complete"), MessageRejected,
     LOCK_LOST),
    ("renew failed", lambda: AutoLockRenewFailed("Failed to auto-renew lock"),
     MessageRejected, LOCK_LOST),
    ("renew timeout", lambda: AutoLockRenewTimeout("Auto-renew period elapsed"),
     MessageRejected, LOCK_LOST),
    ("generic wrapping a socket error", lambda: ServiceBusError(
        "Handler failed: reset", error=ConnectionResetError("reset")), NamespaceUnavailable,
     UNAVAILABLE),
    ("generic with not-allowed", lambda: ServiceBusError(
        "sessions required", condition=ErrorCondition.NotAllowed), MessageRejected, REFUSED),
    ("generic with vendor timeout", lambda: ServiceBusError(
        "slow", condition=b"com.microsoft:timeout"), OperationTimeout, TIMEOUT),
    ("generic wrapping a credential error", lambda: ServiceBusError(
        "Handler failed", error=ClientAuthenticationError("no identity")), NamespaceMisconfigured,
     CREDENTIALS),
    ("generic, nothing known", lambda: ServiceBusError("something"), NamespaceUnavailable,
     UNAVAILABLE),
    ("core: credential", lambda: ClientAuthenticationError("AADSTS7000215"), NamespaceMisconfigured,
     CREDENTIALS),
    ("core: token endpoint unreachable", lambda: ServiceRequestError("no route"),
     NamespaceUnavailable, UNAVAILABLE),
    ("core: response broken", lambda: ServiceResponseError("reset"), NamespaceUnavailable,
     UNAVAILABLE),
    ("core: 404", lambda: _http_error(404), MessageRejected, REFUSED),
    ("core: 408", lambda: _http_error(408), OperationTimeout, TIMEOUT),
    ("core: 503", lambda: _http_error(503), NamespaceUnavailable, UNAVAILABLE),
    ("core: not found, no status", lambda: ResourceNotFoundError("gone"),
     NamespaceUnavailable, UNAVAILABLE),
    ("builtin: timeout", lambda: TimeoutError("slow"), OperationTimeout, TIMEOUT),
    ("builtin: socket", lambda: ConnectionResetError(104, "reset"), NamespaceUnavailable,
     UNAVAILABLE),
    # A refused connection is final for the send: the sender fails over without a retry.
    ("builtin: connection refused", lambda: ConnectionRefusedError(111, "refused"),
     NamespaceRefused, "refused the connection"),
    # A host name that does not resolve makes the namespace unusable; a resolver that
    # cannot answer now is an outage.
    ("builtin: no such host", lambda: socket.gaierror(socket.EAI_NONAME,
                                                      "Name or service not known"),
     NamespaceMisconfigured, "check the host name"),
    ("builtin: resolver down", lambda: socket.gaierror(
        socket.EAI_AGAIN, "Temporary failure in name resolution"), NamespaceUnavailable,
     UNAVAILABLE),
    ("builtin: validation", lambda: ValueError("bad argument"), MessageRejected, REFUSED),
    ("builtin: anything else", lambda: RuntimeError("odd"), NamespaceUnavailable,
     UNAVAILABLE),
    # The same, as the SDK itself builds them from AMQP errors.
    ("sdk: socket error", lambda: _sdk(AMQPConnectionError(
        ErrorCondition.SocketError, description="Connect call failed")),
     NamespaceUnavailable, UNAVAILABLE),
    ("sdk: connection refused", lambda: _sdk(_caused(AMQPConnectionError(
        ErrorCondition.SocketError, description="Connect call failed"),
        ConnectionRefusedError(111, "Connect call failed"))),
     NamespaceRefused, "refused the connection"),
    ("sdk: link not found", lambda: _sdk(AMQPLinkError(
        ErrorCondition.NotFound, description="The messaging entity could not be found")),
     MessageRejected, REFUSED),
    ("sdk: lock lost", lambda: _sdk(AMQPLinkError(
        b"com.microsoft:message-lock-lost", description="lock expired")), MessageRejected,
     LOCK_LOST),
    ("sdk: server busy", lambda: _sdk(AMQPLinkError(
        b"com.microsoft:server-busy", description="busy")), NamespaceUnavailable, UNAVAILABLE),
    ("sdk: token refused", lambda: _sdk(TokenAuthFailure(401, b"InvalidSignature")),
     NamespaceMisconfigured, CREDENTIALS),
    ("sdk: token timeout", lambda: _sdk(AuthenticationException(
        ErrorCondition.InternalError, description="Authorization timeout.")),
     NamespaceUnavailable, UNAVAILABLE),
    ("sdk: message too large", lambda: _sdk(AMQPLinkError(
        ErrorCondition.LinkMessageSizeExceeded, description="too large")), MessageTooLarge,
     REFUSED),
    ("sdk: quota", lambda: _sdk(AMQPLinkError(
        ErrorCondition.ResourceLimitExceeded, description="queue full")), NamespaceUnavailable,
     UNAVAILABLE),
]


@pytest.mark.parametrize(("make", "expected", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_error_mapping(make: Callable[[], BaseException], expected: type[GatewayError],
                       words: str) -> None:
    # Given an SDK exception / When it crosses the boundary
    sdk_error = make()
    mapped = _map(sdk_error, "primary", action="send to 'orders'")
    # Then it is exactly the expected class, with a useful one-line message
    assert type(mapped) is expected
    text = str(mapped)
    assert words in text
    assert "send to 'orders'" in text and "'primary'" in text
    assert type(sdk_error).__name__ in text
    assert "\n" not in text and len(text) < 600
    if isinstance(mapped, TransportError):
        assert mapped.namespace == "primary"


def test_mapping_removes_secrets_from_sdk_text() -> None:
    sdk_error = ServiceBusError(f"Endpoint=sb://x/;SharedAccessKey={KEY} and bare {KEY}")
    mapped = _map(sdk_error, "primary", action="send", secrets=(KEY,))
    assert KEY not in str(mapped)
    assert "***" in str(mapped)


# -- options and construction ----------------------------------------------------------


def test_options_defaults_bound_the_sdk() -> None:
    opts = ServiceBusOptions()
    assert (opts.retry_total, opts.retry_backoff_factor, opts.retry_backoff_max) == (0, 0.0, 0.5)
    assert (opts.operation_timeout, opts.probe_timeout) == (2.0, 2.0)
    assert (opts.max_lock_renewal_duration, opts.prefetch_count) == (300.0, 0)
    assert opts.client_kwargs()["retry_mode"] == "exponential"


@pytest.mark.parametrize("options", [
    {"retry_totl": 2}, {"retry_total": -1}, {"retry_total": True}, {"operation_timeout": 0},
    {"socket_timeout": 0}, {"keep_alive": -1}, {"keep_alive": 1.5},
    {"probe_timeout": float("nan")}, {"retry_mode": "linear"}, {"prefetch_count": -1},
    {"max_lock_renewal_duration": -5}, {"probe_entity": " "},
])
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ServiceBusTransport.from_connection_string(_down_connection_string(), **options)


def test_malformed_connection_string_is_refused_without_quoting_it() -> None:
    with pytest.raises(ConfigError) as info:
        ServiceBusTransport.from_connection_string(f"SharedAccessKey={KEY};nothing")
    assert KEY not in str(info.value)


def test_repr_and_name_have_no_secret() -> None:
    transport = ServiceBusTransport.from_connection_string(_down_connection_string(),
                                                           name="primary")
    assert transport.namespace == "primary"
    assert KEY not in repr(transport) and "127.0.0.1" in repr(transport)
    unnamed = ServiceBusTransport.from_connection_string(_down_connection_string())
    assert unnamed.namespace.startswith("127.0.0.1:")


async def test_credential_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an explicit credential, no azure-identity is needed
    async with ServiceBusTransport("ns.servicebus.windows.net",
                                   AzureNamedKeyCredential("Root", KEY)) as transport:
        assert transport.namespace == "ns.servicebus.windows.net"
        assert KEY not in repr(transport)
    # Without one, azure-identity is imported lazily, and its absence is a ConfigError
    import importlib

    real = importlib.import_module

    def no_identity(name: str, package: str | None = None) -> Any:
        if name.startswith("azure.identity"):
            raise ImportError("No module named 'azure.identity'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_identity)
    with pytest.raises(ConfigError, match="pip install azure-identity"):
        ServiceBusTransport("ns.servicebus.windows.net", name="primary")


def test_connection_string_parts() -> None:
    parts = connection_string_parts(
        f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
        f"SharedAccessKey={KEY};EntityPath=orders")
    assert (parts.host, parts.entity, parts.secrets) == ("ns.servicebus.windows.net", "orders",
                                                         (KEY,))
    assert KEY not in repr(parts)


def test_body_and_property_conversions() -> None:
    assert body_bytes(b"a") == b"a"
    assert body_bytes(iter([b"a", b"b"])) == b"ab"
    assert body_bytes("é") == "é".encode()
    assert body_bytes({"v": 1}) == b"{'v': 1}"
    assert properties_from({b"k": b"v", "n": 1, "f": 1.5, "b": True, "z": None,
                            "u": object.__new__(type("U", (), {"__str__": lambda s: "u"}))}) == {
        "k": "v", "n": 1, "f": 1.5, "b": True, "z": None, "u": "u"}


# -- without a namespace: outages, wrong kinds of operation, secrets ----------------------


@pytest.fixture
async def down() -> AsyncIterator[ServiceBusTransport]:
    async with ServiceBusTransport.from_connection_string(_down_connection_string(),
                                                          name="primary") as transport:
        yield transport


@pytest.mark.parametrize("operation", ["send", "receive", "receive_and_delete", "probe"])
async def test_namespace_down_raises_namespace_unavailable_fast(
        down: ServiceBusTransport, operation: str) -> None:
    # Given a namespace that refuses connections
    started = time.monotonic()
    # When an operation runs
    with pytest.raises(NamespaceUnavailable) as info:
        if operation == "send":
            await down.send("orders", [Message(b"a")])
        elif operation == "probe":
            await down.probe()
        else:
            mode = (ReceiveMode.PEEK_LOCK if operation == "receive"
                    else ReceiveMode.RECEIVE_AND_DELETE)
            await down.receive("orders", max_wait=5, mode=mode)
    # Then it fails over quickly: the SDK's retries are bounded
    assert time.monotonic() - started < 2.5
    assert info.value.namespace == "primary"


async def test_no_key_leaks_in_errors_reprs_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[BaseException] = []
    async with ServiceBusTransport.from_connection_string(_down_connection_string(),
                                                          name="primary") as transport:
        for attempt in (lambda: transport.send("orders", [Message(b"a")]),
                        lambda: transport.receive("orders"), transport.probe):
            with pytest.raises(GatewayError) as info:
                await attempt()
            errors.append(info.value)
        text = repr(transport) + str(vars(transport).get("options"))
    assert len(errors) == 3
    for error in errors:
        text += "".join(traceback.format_exception(error)) + repr(error)
    text += caplog.text
    assert KEY not in text


async def test_partition_operations_are_refused(down: ServiceBusTransport) -> None:
    with pytest.raises(MessageRejected, match="use EventHubsTransport"):
        await down.get_partition_ids("hub")
    with pytest.raises(MessageRejected, match="use EventHubsTransport"):
        await down.read_partition("hub", "0", position=EventPosition.earliest())


async def test_settling_an_unknown_delivery_is_lock_lost(down: ServiceBusTransport) -> None:
    received = ReceivedMessage(message=Message(b"a"), namespace="primary", entity="orders",
                               lock_token="not-ours", sequence_number=1, delivery_count=1,
                               enqueued_time=0.0, locked_until=None)
    for settle in (down.complete, down.abandon):
        with pytest.raises(MessageRejected, match="lock lost"):
            await settle(received)
    with pytest.raises(MessageRejected, match="lock lost"):
        await down.dead_letter(received, reason="bad")


async def test_bad_arguments(down: ServiceBusTransport) -> None:
    with pytest.raises(ConfigError):
        await down.receive("orders", max_messages=0)
    with pytest.raises(ConfigError):
        await down.receive("a/b")
    with pytest.raises(ConfigError):
        await down.send("", [Message(b"a")])
    await down.send("orders", [])  # nothing to send: no I/O, no error


async def test_another_entity_than_the_connection_strings_is_rejected() -> None:
    conn_str = _down_connection_string() + ";EntityPath=orders"
    async with ServiceBusTransport.from_connection_string(conn_str, name="primary") as sb:
        with pytest.raises(MessageRejected, match="EntityPath"):
            await sb.send("invoices", [Message(b"a")])
        with pytest.raises(MessageRejected, match="EntityPath"):
            await sb.receive("invoices")
    # A probe about another entity is refused for good, as the send would be: it is
    # logged (the next send says it too) and does not raise (the probe reports outages)
    async with ServiceBusTransport.from_connection_string(
            conn_str, name="primary", probe_entity="invoices") as sb:
        await sb.probe()
        assert sb._senders == {}


class FakeSender:
    """Stands in for ServiceBusSender, with the SDK's real batches."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.sent: list[ServiceBusMessageBatch] = []
        self.fail_on: dict[int, Exception] = {}

    async def create_message_batch(self) -> ServiceBusMessageBatch:
        return ServiceBusMessageBatch(max_size_in_bytes=self.max_size)

    async def send_messages(self, batch: ServiceBusMessageBatch, *, timeout: float) -> None:
        failure = self.fail_on.get(len(self.sent))
        self.sent.append(batch)
        if failure is not None:
            raise failure

    async def close(self) -> None:
        pass


async def test_send_splits_refuses_too_large_and_reports_partial_failure(
        down: ServiceBusTransport) -> None:
    sender = FakeSender(max_size=1_000)
    down._senders["q"] = sender  # type: ignore[assignment]
    # Given messages that need three batches, When all are sent, Then three batches go
    await down.send("q", [Message(b"x" * 400) for _ in range(5)])
    assert [len(b) for b in sender.sent] == [2, 2, 1]
    # A message too large on its own: nothing is sent, and it is named
    sender.sent.clear()
    with pytest.raises(MessageTooLarge, match="refused for good") as caught:
        await down.send("q", [Message(b"ok"), Message(b"x" * 2_000, message_id="big")])
    assert sender.sent == []
    assert (caught.value.sent, caught.value.message_id) == (0, "big")
    # A later batch refused for size: the messages of the earlier ones landed
    sender.fail_on = {1: MessageSizeExceededError(message="the batch is too large")}
    with pytest.raises(MessageTooLarge, match="SDK batch 2 of 3") as caught:
        await down.send("q", [Message(b"x" * 400) for _ in range(5)])
    assert (caught.value.sent, caught.value.message_id) == (2, None)
    sender.fail_on = {}
    sender.sent.clear()
    # A key Service Bus would refuse (over 128 characters): nothing is sent
    with pytest.raises(MessageRejected):
        await down.send("q", [Message(b"ok", partition_key="k" * 129)])
    assert sender.sent == []
    # The first batch failing: nothing landed, the outage is reported as it is
    sender.fail_on = {0: ServiceBusConnectionError(message="down")}
    with pytest.raises(NamespaceUnavailable):
        await down.send("q", [Message(b"x" * 400) for _ in range(3)])
    # A later batch failing: earlier ones landed, so the outcome is unknown
    sender.sent.clear()
    sender.fail_on = {1: ServiceBusConnectionError(message="down")}
    with pytest.raises(OperationTimeout, match="after 1 of 2 batches landed"):
        await down.send("q", [Message(b"x" * 400) for _ in range(3)])


async def test_aclose_is_idempotent(down: ServiceBusTransport) -> None:
    with pytest.raises(NamespaceUnavailable):
        await down.send("orders", [Message(b"a")])
    await down.aclose()
    await down.aclose()
    # A later call opens a new client (and still finds the namespace down).
    with pytest.raises(NamespaceUnavailable):
        await down.send("orders", [Message(b"a")])


# -- end to end, on the namespace emulator ------------------------------------------------


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Any]:
    queues: list[Any] = ["orders", QueueSpec(name="small", max_message_size=4096),
              QueueSpec(name="large", max_message_size=300_000),
              QueueSpec(name="short", lock_duration=2.0),
              QueueSpec(name="renewed", lock_duration=5.0)]
    async with Emulator({"primary": 0}, data_dir=tmp_path, queues=queues) as emu:
        yield emu


@pytest.fixture
async def sb(emulator: Any) -> AsyncIterator[ServiceBusTransport]:
    async with ServiceBusTransport.from_connection_string(
            emulator.connection_string("primary"), name="primary") as transport:
        yield transport


async def _drain(transport: ServiceBusTransport, entity: str) -> list[ReceivedMessage]:
    got = await transport.receive(entity, max_messages=50, max_wait=0.5)
    for r in got:
        await transport.complete(r)
    return got


async def test_send_receive_complete(sb: ServiceBusTransport) -> None:
    # Given two messages with properties of every type and a partition key
    sent = [Message(b"one", properties={"n": 1, "big": 2**40, "f": 1.5, "ok": True, "z": None,
                                        "s": "x"}),
            Message(b"two", partition_key="k")]
    before = time.time()
    await sb.send("orders", sent)
    # When they are received and completed
    got = await sb.receive("orders", max_messages=10, max_wait=2)
    for r in got:
        await sb.complete(r)
    # Then they came in order with their metadata, and the queue is empty
    assert [r.message for r in got] == sent
    assert [r.body for r in got] == [b"one", b"two"]
    assert dict(got[0].message.properties) == dict(sent[0].properties)
    assert got[1].message.partition_key == "k"
    assert all(r.delivery_count == 1 and r.namespace == "primary" for r in got)
    assert got[0].sequence_number < got[1].sequence_number
    assert before - 1 <= got[0].enqueued_time <= time.time() + 1
    assert got[0].locked_until is not None and got[0].locked_until > time.time() + 20
    assert got[0].lock_token and got[0].lock_token != got[1].lock_token
    assert await sb.receive("orders", max_wait=0.3) == []


async def test_abandon_redelivers_and_settling_twice_is_lock_lost(
        sb: ServiceBusTransport) -> None:
    await sb.send("orders", [Message(b"a", message_id="m1")])
    [first] = await sb.receive("orders", max_wait=2)
    await sb.abandon(first)
    with pytest.raises(MessageRejected, match="lock lost"):
        await sb.complete(first)
    [second] = await sb.receive("orders", max_wait=2)
    assert (second.message_id, second.delivery_count) == ("m1", 2)
    assert second.lock_token != first.lock_token
    await sb.complete(second)


async def test_dead_letter(sb: ServiceBusTransport) -> None:
    # Given a received message / When it is dead-lettered with a reason
    await sb.send("orders", [Message(b"poison", message_id="p1")])
    [r] = await sb.receive("orders", max_wait=2)
    await sb.dead_letter(r, reason="bad-format", description="not JSON")
    # Then it waits in the dead-letter sub-queue with the reason, not in the queue
    assert await sb.receive("orders", max_wait=0.3) == []
    [dead] = await sb.receive("orders/$DeadLetterQueue", max_wait=2)
    assert dead.message_id == "p1" and dead.body == b"poison"
    assert dead.message.properties["DeadLetterReason"] == "bad-format"
    assert dead.message.properties["DeadLetterErrorDescription"] == "not JSON"
    with pytest.raises(MessageRejected, match="dead letter already"):
        await sb.dead_letter(dead, reason="again")
    await sb.complete(dead)
    assert await sb.receive("orders/$DeadLetterQueue", max_wait=0.3) == []


async def test_receive_and_delete(sb: ServiceBusTransport) -> None:
    await sb.send("orders", [Message(b"a"), Message(b"b")])
    got = await sb.receive("orders", max_messages=5, max_wait=2,
                           mode=ReceiveMode.RECEIVE_AND_DELETE)
    assert [r.body for r in got] == [b"a", b"b"]
    assert all(r.lock_token is None and r.locked_until is None for r in got)
    assert await sb.receive("orders", max_wait=0.3) == []
    with pytest.raises(MessageRejected, match="lock lost"):
        await sb.complete(got[0])


async def test_a_large_send_is_split_into_batches_that_fit(sb: ServiceBusTransport) -> None:
    # Given 10 messages of 60 KB: more than one SDK batch (256 KB on a standard entity)
    sent = [Message(bytes([i]) * 60_000, message_id=f"m{i}") for i in range(10)]
    # When they are sent at once
    await sb.send("large", sent)
    # Then all arrive, in order
    got: list[ReceivedMessage] = []
    while len(got) < 10:
        batch = await _drain(sb, "large")
        assert batch, f"only {len(got)} of 10 arrived"
        got += batch
    assert [r.message_id for r in got] == [m.message_id for m in sent]


async def test_a_message_too_large_is_rejected_and_nothing_is_sent(
        sb: ServiceBusTransport) -> None:
    with pytest.raises(MessageRejected, match="refused for good"):
        await sb.send("small", [Message(b"ok"), Message(b"x" * 8000)])
    assert await sb.receive("small", max_wait=0.3) == []


async def test_locks_are_renewed_while_the_handler_runs(sb: ServiceBusTransport) -> None:
    # Given a queue whose locks last 5 s (Service Bus's shortest), and a message from it
    await sb.send("renewed", [Message(b"slow", message_id="s1")])
    [r] = await sb.receive("renewed", max_wait=2)
    # When the handler takes half as long again
    await asyncio.sleep(7.5)
    # Then the message was not delivered to anyone else, and it can still be completed
    assert await sb.receive("renewed", max_wait=0.3) == []
    await sb.complete(r)
    assert await sb.receive("renewed", max_wait=0.3) == []


async def test_without_renewal_the_lock_expires(emulator: Any) -> None:
    async with ServiceBusTransport.from_connection_string(
            emulator.connection_string("primary"), name="primary",
            max_lock_renewal_duration=0) as sb:
        await sb.send("short", [Message(b"slow", message_id="s1")])
        [r] = await sb.receive("short", max_wait=2)
        await asyncio.sleep(3)
        with pytest.raises(MessageRejected, match="lock lost"):
            await sb.complete(r)
        [again] = await sb.receive("short", max_wait=2)
        assert (again.message_id, again.delivery_count) == ("s1", 2)
        await sb.complete(again)


async def test_unknown_entities_are_rejected(sb: ServiceBusTransport) -> None:
    with pytest.raises(MessageRejected, match="refused for good"):
        await sb.send("nosuch", [Message(b"a")])
    with pytest.raises(MessageRejected, match="refused for good"):
        await sb.receive("nosuch", max_wait=1)
    await sb.probe()  # the namespace answers, even about an unknown entity


async def test_probe_and_outage(sb: ServiceBusTransport, tmp_path: Path) -> None:
    # Given a namespace that answers
    await sb.send("orders", [Message(b"before")])
    await sb.probe()
    control = LocalNamespace("primary", data_dir=tmp_path)
    try:
        # When it is taken down
        control.down()
        await asyncio.sleep(0.3)
        # Then every operation reports the outage within a second or two
        for attempt in (lambda: sb.send("orders", [Message(b"during")]),
                        lambda: sb.receive("orders", max_wait=3), sb.probe):
            started = time.monotonic()
            with pytest.raises(NamespaceUnavailable) as info:
                await attempt()
            assert time.monotonic() - started < 2.5
            assert info.value.namespace == "primary"
        # And once it is back, the transport works again
        control.up()
        deadline = time.monotonic() + 10
        while True:
            try:
                await sb.probe()
                break
            except NamespaceUnavailable:
                assert time.monotonic() < deadline, "the namespace did not come back"
                await asyncio.sleep(0.2)
        await sb.send("orders", [Message(b"after")])
        assert [r.body for r in await _drain(sb, "orders")] == [b"before", b"after"]
    finally:
        control.up()
        control.close()


async def test_prepare_send_opens_a_sender_and_sends_nothing(
        sb: ServiceBusTransport, down: ServiceBusTransport) -> None:
    # When a sender to an existing queue is prepared, Then it opens and nothing is sent
    await sb.prepare_send("orders")
    assert await sb.receive("orders", max_wait=0.3) == []
    # And preparing an unknown queue, or on a namespace that is down, fails as a send would
    with pytest.raises(MessageRejected):
        await sb.prepare_send("no-such-queue")
    with pytest.raises(NamespaceUnavailable):
        await down.prepare_send("orders")


async def test_handler_options_reach_every_sender_and_receiver(emulator: Any) -> None:
    # Senders and receivers do not inherit the client's socket_timeout or keep_alive:
    # they are passed to each.
    async with ServiceBusTransport.from_connection_string(
            emulator.connection_string("primary"), socket_timeout=0.05,
            keep_alive=7) as transport:
        assert await transport.receive("orders", max_wait=0.3) == []
        await transport.prepare_send("orders")
        [receiver] = transport._receivers.values()
        [sender] = transport._senders.values()
        for handler in (receiver, sender):
            assert handler._config.socket_timeout == 0.05
            assert handler._config.keep_alive == 7
    # By default the keep-alive task is off: a failed handler closes at once.
    assert ServiceBusOptions().keep_alive == 0


async def test_probe_reopens_the_sender_that_the_next_send_uses(
        sb: ServiceBusTransport, tmp_path: Path) -> None:
    # Given a transport that sent to a queue before its namespace went down and came back
    await sb.send("orders", [Message(b"before")])
    before = sb._senders["orders"]
    control = LocalNamespace("primary", data_dir=tmp_path)
    try:
        control.down()
        await asyncio.sleep(0.3)
        with pytest.raises(NamespaceUnavailable):
            await sb.send("orders", [Message(b"during")])
        control.up()
        await asyncio.sleep(0.3)
        # When the probe finds it back
        await sb.probe()
    finally:
        control.up()
        control.close()
    # Then its sender to that queue is a new one, open on a new connection, without
    # the keep-alive task (closing it does not wait for one)
    probed = sb._senders["orders"]
    assert probed is not before and probed._running
    assert probed._config.keep_alive == 0
    # And the next send (a replay) goes through it instead of opening another
    await sb.send("orders", [Message(b"after")])
    assert sb._senders["orders"] is probed
    assert [r.body for r in await _drain(sb, "orders")] == [b"before", b"after"]


async def test_a_probe_about_an_entity_not_sent_to_keeps_no_sender(
        sb: ServiceBusTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a transport that never sent: the probe asks about a queue nobody sends to
    opened: list[Any] = []
    original = ServiceBusClient.get_queue_sender

    def spy(self: ServiceBusClient, *args: Any, **kwargs: Any) -> Any:
        opened.append(original(self, *args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(ServiceBusClient, "get_queue_sender", spy)
    await sb.probe()
    # Then its sender had the handler options (no keep-alive), was closed, and not kept
    [sender] = opened
    assert sender._config.keep_alive == 0 and sender._config.socket_timeout == 0.2
    assert not sender._running
    assert sb._senders == {}


async def test_connections_do_not_load_the_ca_certificates_each_time(
        emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Loading the CA bundle takes 20-100 ms of CPU on the event loop; the SDK does it on
    # every connection (each reconnect attempt and probe during an outage) unless it is
    # given an SSL context.
    loads: list[object] = []
    original = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        original(self, *args, **kwargs)

    async with ServiceBusTransport.from_connection_string(
            emulator.connection_string("primary"), name="primary") as transport:
        await transport.probe()  # a first connection may build the shared context
        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
        # When it opens several connections
        await transport.send("orders", [Message(b"a")])
        for _ in range(3):
            await transport.probe()
        assert await transport.receive("orders", max_wait=0.3, mode=ReceiveMode.RECEIVE_AND_DELETE)
        # Then none loads the certificates again, and every handler has the same context
        assert loads == []
        [sender] = transport._senders.values()
        [receiver] = transport._receivers.values()
        context = sender._config.ssl_context
        assert isinstance(context, ssl.SSLContext) and receiver._config.ssl_context is context
        # which verifies servers as the SDK's own would (for namespaces with TLS)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.cert_store_stats()["x509_ca"] > 0
