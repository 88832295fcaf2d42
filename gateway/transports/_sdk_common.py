"""What the Service Bus and Event Hubs transports share, without importing ``azure``.

- :class:`SdkOptions`: the bounds on the SDKs' own retries and waits;
- error classification: an :class:`Outcome` from an AMQP condition, a status code or
  a built-in exception, and :func:`build_error` to turn it into a :mod:`gateway.errors`
  error whose message is one redacted line;
- conversions between SDK values (datetimes, string offsets, AMQP property values,
  body sections) and the project's records.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import importlib
import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from gateway._support.secrets import redact
from gateway.transports.base import EventPosition, Transport
from replication import (
    ConfigError,
    GatewayError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    PropertyValue,
)

__all__ = [
    "Outcome",
    "SdkOptions",
    "SdkTransport",
    "amqp_properties",
    "body_bytes",
    "build_error",
    "builtin_outcome",
    "check_entity",
    "check_namespace_host",
    "condition_outcome",
    "connection_string_parts",
    "default_credential",
    "epoch_seconds",
    "find_status_code",
    "host_of",
    "parse_offset",
    "properties_from",
    "starting_position",
    "status_outcome",
    "text_or_none",
    "tls_context",
    "walk",
]

logger = logging.getLogger("gateway.transports")
T = TypeVar("T")
OptionsT = TypeVar("OptionsT", bound="SdkOptions")

#: The longest SDK text kept in a mapped error's message.
_MAX_DETAIL = 300


@dataclass(frozen=True, kw_only=True)
class SdkOptions:
    """Bounds on an Azure SDK client's own retries and waits.

    The gateway retries and fails over itself (``RetryPolicy``), so by default the
    SDK does not retry: a namespace that refuses connections surfaces as
    ``NamespaceUnavailable`` within tens of milliseconds, one that hangs within
    ``operation_timeout``. (The SDKs sleep one backoff even after their last attempt,
    so the default backoff is 0 too; raise both together.)

    Args:
        retry_total: SDK retries per operation (its default is 3).
        retry_backoff_factor: the SDK's first backoff in seconds (its default is 0.8).
        retry_backoff_max: the SDK's longest backoff in seconds (its default is 120).
        retry_mode: ``"exponential"`` or ``"fixed"``.
        operation_timeout: seconds one send, settlement or management call may take,
            SDK retries included; a send that takes longer raises ``OperationTimeout``.
        probe_timeout: seconds :meth:`probe` waits for the namespace to answer.
        probe_entity: the entity :meth:`probe` asks about; default: the connection
            string's ``EntityPath``, else the last entity used, else a name that
            does not exist (a "not found" answer proves the namespace answers too).
        socket_timeout: the longest the SDK's connection waits in one socket read
            (its default is 0.2). A settlement or send on a connection whose receiver is
            waiting for messages queues behind that read, so this bounds the latency
            a waiting receiver adds to every settlement; smaller costs more wake-ups
            while idle.
    """

    retry_total: int = 0
    retry_backoff_factor: float = 0.0
    retry_backoff_max: float = 0.5
    retry_mode: str = "exponential"
    operation_timeout: float = 2.0
    probe_timeout: float = 2.0
    probe_entity: str | None = None
    socket_timeout: float = 0.2

    def __post_init__(self) -> None:
        _whole(self, "retry_total", minimum=0)
        for name in ("retry_backoff_factor", "retry_backoff_max"):
            _seconds(self, name, positive=False)
        for name in ("operation_timeout", "probe_timeout", "socket_timeout"):
            _seconds(self, name, positive=True)
        if self.retry_mode not in ("exponential", "fixed"):
            raise ConfigError("retry_mode must be 'exponential' or 'fixed', "
                              f"not {self.retry_mode!r}")
        if self.probe_entity is not None and (
            not isinstance(self.probe_entity, str) or not self.probe_entity.strip()
        ):
            raise ConfigError(f"probe_entity must be an entity name, not {self.probe_entity!r}")

    @classmethod
    def from_options(cls: type[OptionsT], options: Mapping[str, Any], *, what: str) -> OptionsT:
        """Build from keyword options, refusing unknown names loudly.

        Raises:
            ConfigError: an unknown option or a bad value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown {what} option(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        return cls(**options)

    def client_kwargs(self) -> dict[str, Any]:
        """The keywords every SDK client constructor takes: retries, the socket
        timeout, and the process's one TLS context (:func:`tls_context`)."""
        return {
            "retry_total": self.retry_total,
            "retry_backoff_factor": self.retry_backoff_factor,
            "retry_backoff_max": self.retry_backoff_max,
            "retry_mode": self.retry_mode,
            "socket_timeout": self.socket_timeout,
            "ssl_context": tls_context(),
        }


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The TLS client context of every SDK connection in this process.

    The same as the SDKs build without one (certifi's CA bundle; certificates and
    host names verified), built once: otherwise the SDKs load the bundle again for
    every connection they open, 20-100 ms of CPU on the event loop each time, and
    during an outage they open one per reconnect attempt and per probe, which held
    up sends to the namespace that was still up.
    """
    import certifi  # the SDKs' own dependency, imported only when a client is built

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(certifi.where())
    return context


def default_credential(service: str) -> Any:
    """azure-identity's async ``DefaultAzureCredential``, for a namespace given by its
    host name alone; imported here, as only such namespaces need azure-identity.

    Raises:
        ConfigError: azure-identity is not installed.
    """
    try:
        identity = importlib.import_module("azure.identity.aio")
    except ImportError as exc:
        raise ConfigError(f"a {service} namespace without a connection string or credential "
                          "needs azure-identity: pip install azure-identity") from exc
    return identity.DefaultAzureCredential()


def check_namespace_host(value: object) -> str:
    """Return ``value`` if it can be a fully qualified namespace; raise ``ConfigError``."""
    if not isinstance(value, str) or not value:
        raise ConfigError("fully_qualified_namespace must be a host name such as "
                          "NAME.servicebus.windows.net")
    return value


def _whole(options: object, name: str, *, minimum: int) -> None:
    value = getattr(options, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, not {value!r}")


def _seconds(options: object, name: str, *, positive: bool) -> None:
    value = getattr(options, name)
    # ``not value > 0`` also refuses NaN; bool is an int but not a duration.
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name} must be a number of seconds {bound}, not {value!r}")


# -- classification ------------------------------------------------------------------


class Outcome(enum.Enum):
    """What an SDK failure means to the gateway."""

    UNAVAILABLE = "unavailable"  # transient: nothing happened; retry, fail over, buffer
    TIMEOUT = "timeout"  # transient: the outcome is unknown
    REJECTED = "rejected"  # permanent for this message or entity
    LOCK_LOST = "lock_lost"  # permanent for this delivery; the message comes back
    OWNERSHIP_LOST = "ownership_lost"  # a higher owner level took the partition


# AMQP error conditions by the part after the first ":" ("amqp:not-found" -> "not-found"),
# which is how azure-eventhub reports them (EventHubError.error).
_CONDITIONS: dict[str, Outcome] = {
    "not-found": Outcome.REJECTED,
    "unauthorized-access": Outcome.REJECTED,
    "auth-failed": Outcome.REJECTED,
    "decode-error": Outcome.REJECTED,
    "not-allowed": Outcome.REJECTED,
    "invalid-field": Outcome.REJECTED,
    "not-implemented": Outcome.REJECTED,
    "precondition-failed": Outcome.REJECTED,
    "resource-deleted": Outcome.REJECTED,
    "link:message-size-exceeded": Outcome.REJECTED,
    "argument-error": Outcome.REJECTED,
    "argument-out-of-range": Outcome.REJECTED,
    "entity-already-exists": Outcome.REJECTED,
    "timeout": Outcome.TIMEOUT,
    "message-lock-lost": Outcome.LOCK_LOST,
    "session-lock-lost": Outcome.LOCK_LOST,
    "message-not-found": Outcome.LOCK_LOST,
    "link:stolen": Outcome.OWNERSHIP_LOST,
    "server-busy": Outcome.UNAVAILABLE,
    "resource-limit-exceeded": Outcome.UNAVAILABLE,
    "entity-disabled": Outcome.UNAVAILABLE,
    "internal-error": Outcome.UNAVAILABLE,
    "connection:forced": Outcome.UNAVAILABLE,
    "link:detach-forced": Outcome.UNAVAILABLE,
    "socket-error": Outcome.UNAVAILABLE,
}


def condition_outcome(condition: object) -> Outcome | None:
    """The outcome of an AMQP error condition (``"amqp:not-found"``, ``b"..."``, ``"not-found"``).

    Returns:
        None for an unknown or missing condition.
    """
    if isinstance(condition, (bytes, bytearray)):
        condition = bytes(condition).decode("utf-8", "replace")
    if not isinstance(condition, str) or not condition:
        return None
    condition = condition.strip().lower()
    found = _CONDITIONS.get(condition)
    if found is None and ":" in condition:
        found = _CONDITIONS.get(condition.partition(":")[2])
    return found


def status_outcome(status: int | None) -> Outcome | None:
    """The outcome of an HTTP-like status code of a management or token request."""
    if status is None:
        return None
    if status == 408:
        return Outcome.TIMEOUT
    if status in (400, 401, 403, 404, 409, 410, 413):
        return Outcome.REJECTED
    if status == 429 or status >= 500:
        return Outcome.UNAVAILABLE
    return None


_STATUS_TEXT = re.compile(r"(?i)status[ _]code:?\s*'?(\d{3})\b")


def walk(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps (``inner_exception``, ``__cause__``, ``__context__``)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 12:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for nxt in (getattr(current, "inner_exception", None), current.__cause__,
                    current.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def find_status_code(exc: BaseException) -> int | None:
    """A status code carried by ``exc`` or what it wraps (attribute, else its text)."""
    for item in walk(exc):
        value = getattr(item, "status_code", None)
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("ascii", "replace")
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    for item in walk(exc):
        match = _STATUS_TEXT.search(str(item))
        if match:
            return int(match.group(1))
    return None


def builtin_outcome(exc: BaseException) -> Outcome | None:
    """The outcome of a built-in exception raised through an SDK, or None."""
    # TimeoutError is an OSError: test it first.
    if isinstance(exc, TimeoutError):
        return Outcome.TIMEOUT
    if isinstance(exc, (OSError, EOFError)):
        return Outcome.UNAVAILABLE
    if isinstance(exc, (ValueError, TypeError)):
        # Client-side validation (a message or batch too large, a bad argument).
        return Outcome.REJECTED
    return None


def _detail(exc: BaseException, secrets: Iterable[str]) -> str:
    text = " ".join(str(exc).split()) or "no details"
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = redact(text)
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3] + "..."
    return f"{type(exc).__name__}: {text}"


def build_error(outcome: Outcome, exc: BaseException, *, namespace: str, action: str,
                secrets: Iterable[str] = ()) -> GatewayError:
    """The project's error for ``outcome``, with a one-line redacted message.

    Args:
        outcome: what the failure means.
        exc: the SDK's exception (its type and text are quoted, secrets removed).
        namespace: the namespace's name as the gateway knows it.
        action: what was attempted, e.g. ``"send to 'orders'"``.
        secrets: literal values (keys, signatures) to remove from the text.
    """
    detail = _detail(exc, secrets)
    where = f"{action} on namespace {namespace!r}"
    if outcome is Outcome.UNAVAILABLE:
        return NamespaceUnavailable(f"{where} failed: the namespace is unavailable ({detail})",
                                    namespace=namespace)
    if outcome is Outcome.TIMEOUT:
        return OperationTimeout(
            f"{where} timed out: the outcome is unknown, a retry may deliver a duplicate "
            f"({detail})", namespace=namespace)
    if outcome is Outcome.LOCK_LOST:
        return MessageRejected(
            f"{where} failed: lock lost (expired, or settled already); do not retry, the "
            f"message is delivered again ({detail})")
    if outcome is Outcome.OWNERSHIP_LOST:
        return OwnershipLost(
            f"{where} failed: a reader with a higher owner level took the partition; stop "
            f"reading it ({detail})")
    return MessageRejected(f"{where} was refused for good ({detail})")


# -- connection strings ----------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionStringParts:
    """The non-secret parts of a connection string, and its secret values (to scrub)."""

    host: str
    entity: str | None
    secrets: tuple[str, ...] = dataclasses.field(repr=False)


def host_of(address: str) -> str:
    """The host (and port) of ``sb://HOST/`` or ``HOST``."""
    return address.strip().split("://", 1)[-1].strip("/").split("/")[0]


def connection_string_parts(conn_str: str) -> ConnectionStringParts:
    """Split an Azure connection string (``Endpoint=sb://HOST/;...``).

    Raises:
        ConfigError: no ``Endpoint``; the message never quotes the string.
    """
    if not isinstance(conn_str, str):
        raise ConfigError(f"a connection string must be a str, not {type(conn_str).__name__}")
    host, entity, secrets = "", None, []
    for part in conn_str.split(";"):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "endpoint":
            host = host_of(value)
        elif key == "entitypath":
            entity = value.strip() or None
        elif key in ("sharedaccesskey", "sharedaccesssignature"):
            secrets.append(value.strip())
    if not host:
        raise ConfigError("the connection string has no Endpoint=sb://HOST/ part")
    return ConnectionStringParts(host=host, entity=entity, secrets=tuple(s for s in secrets if s))


# -- conversions -----------------------------------------------------------------------


def epoch_seconds(value: dt.datetime | None) -> float | None:
    """A datetime from an SDK as seconds since the epoch (naive means UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.timestamp()


def parse_offset(offset: object) -> int:
    """An SDK offset (a string) as an int; -1 when it is not a whole number.

    Event Hubs offsets are decimal strings; namespaces with geo-replication may
    use others. Such an offset cannot be expressed as :attr:`PartitionEvent.offset`:
    it becomes -1, and a reader should position by sequence number instead.
    """
    if isinstance(offset, int) and not isinstance(offset, bool):
        return offset
    if isinstance(offset, (bytes, bytearray)):
        offset = bytes(offset).decode("ascii", "replace")
    if isinstance(offset, str) and re.fullmatch(r"-?\d+", offset.strip()):
        return int(offset)
    return -1


def starting_position(position: EventPosition) -> tuple[str | int | dt.datetime, bool]:
    """``(starting_position, inclusive)`` for ``EventHubConsumerClient.receive_batch``."""
    if position.latest:
        return "@latest", False
    if position.offset is not None:
        return str(position.offset), position.inclusive
    if position.enqueued_time is not None:
        when = dt.datetime.fromtimestamp(position.enqueued_time, tz=dt.timezone.utc)
        return when, position.inclusive
    if position.sequence_number is not None and position.sequence_number >= 0:
        return position.sequence_number, position.inclusive
    # earliest() (sequence number -1) and an empty position read from the start.
    return "-1", False


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def text_or_none(value: object) -> str | None:
    """An SDK id or key (str, bytes, UUID, ...) as a str; None stays None."""
    return None if value is None else _text(value)


def scalar(value: object) -> PropertyValue:
    """An AMQP property value as a str, int, float, bool or None.

    Bytes are decoded as UTF-8 (invalid bytes replaced); any other type (UUIDs,
    timestamps, lists from other producers) becomes its ``str``.
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return _text(value)


#: The SDKs' AMQP encoder writes a Python int as a 32-bit AMQP int.
_INT32 = range(-(2**31), 2**31)


def amqp_properties(properties: Mapping[str, PropertyValue]) -> dict[str, Any] | None:
    """Application properties for the SDKs, or None when there are none.

    An int outside the 32-bit range goes in the encoder's typed form (an AMQP long),
    so that it arrives as the same int; beyond 64 bits the SDK refuses it.
    """
    if not properties:
        return None
    return {key: {"TYPE": "LONG", "VALUE": value}
            if isinstance(value, int) and not isinstance(value, bool) and value not in _INT32
            else value
            for key, value in properties.items()}


def properties_from(properties: Mapping[Any, Any] | None) -> dict[str, PropertyValue]:
    """Application properties from an SDK message (keys may be bytes)."""
    if not properties:
        return {}
    return {_text(key): scalar(value) for key, value in properties.items()}


def body_bytes(body: object) -> bytes:
    """The body of an SDK message as bytes.

    Data sections (bytes, or an iterable of bytes) are joined; a str is encoded as
    UTF-8; any other body (an AMQP value or sequence from another producer)
    becomes the UTF-8 of its ``str``.
    """
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, Iterable) and not isinstance(body, Mapping):
        items = list(body)
        if all(isinstance(i, (bytes, bytearray, memoryview)) for i in items):
            return b"".join(bytes(i) for i in items)
        body = items
    return str(body).encode("utf-8")


# -- the shared transport plumbing --------------------------------------------------------

#: Added to our own bound on an SDK call, so that the SDK's own timeout fires first.
GRACE = 1.0
#: Seconds to close one SDK handler (a dead namespace must not hang aclose).
CLOSE_TIMEOUT = 2.0
#: An entity that does not exist: a "not found" answer proves the namespace answers.
PROBE_FALLBACK = "geogateway-probe"


class _Closable(Protocol):
    async def close(self) -> None: ...


class SdkTransport(Transport):
    """What both SDK transports share: names, bounded SDK calls, error mapping, closing.

    Subclasses implement :meth:`_outcome` (their SDK's error table).
    """

    host: str
    _secrets: tuple[str, ...] = ()
    _entity_of_connection: str | None = None
    _last_entity: str | None = None

    def _name(self, *, host: str, name: str | None, secrets: tuple[str, ...],
              entity: str | None) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"name must be a non-empty str, not {name!r}")
        self.namespace = name or host
        self.host = host
        self._secrets = secrets
        self._entity_of_connection = entity
        self._last_entity = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, host={self.host!r})"

    @property
    def identity(self) -> str:
        """``servicebus://HOST`` or ``eventhubs://HOST`` (no credential)."""
        return f"{type(self).__name__.removesuffix('Transport').lower()}://{self.host}"

    def _outcome(self, exc: BaseException) -> Outcome:
        raise NotImplementedError()  # pragma: no cover

    def _map(self, exc: BaseException, action: str) -> GatewayError:
        return build_error(self._outcome(exc), exc, namespace=self.namespace, action=action,
                           secrets=self._secrets)

    def _probe_entity(self, options: SdkOptions) -> str:
        return (options.probe_entity or self._entity_of_connection or self._last_entity
                or PROBE_FALLBACK)

    async def _call(self, action: str, fn: Callable[[], Awaitable[T]], *, seconds: float) -> T:
        """Run one SDK call, bounded by ``seconds``, mapping its errors.

        Raises:
            OperationTimeout: no answer within ``seconds``.
            GatewayError: the SDK's error, mapped.
        """
        with anyio.move_on_after(seconds):
            try:
                return await fn()
            except GatewayError:
                raise
            except Exception as exc:
                raise self._map(exc, action) from exc
        raise OperationTimeout(
            f"{action} on namespace {self.namespace!r} got no answer within {seconds:g} s: "
            "the outcome is unknown, a retry may deliver a duplicate", namespace=self.namespace)

    async def _close(self, what: str, handler: _Closable) -> None:
        """Close an SDK handler we are dropping, within ``CLOSE_TIMEOUT``."""
        with anyio.move_on_after(CLOSE_TIMEOUT):
            try:
                await handler.close()
            except Exception as exc:  # the handler is dropped either way; say why it failed
                logger.debug("closing %s of %s failed: %s", what, self.namespace,
                             self._map(exc, f"close {what}"))


    async def _close_all(self, handlers: Iterable[tuple[str, _Closable]]) -> None:
        """Close handlers concurrently (each within ``CLOSE_TIMEOUT``)."""
        async with anyio.create_task_group() as group:
            for what, handler in handlers:
                group.start_soon(self._close, what, handler)


def check_entity(entity: str) -> str:
    """Return ``entity`` if it can name an entity; raise ``ConfigError`` if not."""
    if not isinstance(entity, str) or not entity.strip():
        raise ConfigError(f"entity must be the name of a queue, topic or event hub, "
                          f"not {entity!r}")
    return entity
