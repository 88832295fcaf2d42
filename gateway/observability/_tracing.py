"""OpenTelemetry traces of sends, receives, processing and settlements: :class:`Tracing`.

Spans follow the OpenTelemetry messaging semantic conventions: ``messaging.system``
(``servicebus``, ``eventhubs``, ``geogateway_local`` for local namespaces),
``messaging.destination.name`` (the entity), ``messaging.operation.type`` (``send``,
``receive``, ``process``, ``settle``) and ``messaging.operation.name``,
``messaging.message.id``; ``geogateway.namespace`` names the namespace (role) a copy
came from. Names are ``"{operation} {entity}"``.

- **send** (PRODUCER): one span per ``send`` / ``send_batch``, a child of the
  caller's current span. Each message gets its context in the ``traceparent`` and
  ``Diagnostic-Id`` properties (unless it carries one already, which is then
  linked). A failover, an outage and buffering during the send are span events.
  A replay's batch is a send span of its own (``geogateway.replay``), linked to the
  messages' contexts, which the durable queue kept.
- **receive** (CONSUMER): one span per batch a namespace returned
  (``geogateway.namespace``), one link per copy, so each copy from each namespace is
  a link.
- **process** (CONSUMER): one span per message handled by ``run()`` (or event by the
  geo partition receiver), a child of the message's context: the trace of the send
  goes on in the process that handles it.
- **settle** (CLIENT): one span per group of copies settled together, one link per
  copy. A copy suppressed as a duplicate gets a span of its own in its message's
  trace, with ``geogateway.duplicate = true`` (``skip`` for a partition's event).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from gateway.geo import GatewayHooks, MessageTracer, SendTrace
from gateway.observability._propagation import context_properties, span_context
from gateway.transports.base import PartitionEvent, ReceivedMessage
from replication import ConfigError, Message, with_properties

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer, TracerProvider

__all__ = ["Tracing", "trace_context"]

_MAX_LINKS = 128  # the SDK's default limit: more would be dropped anyway


def _otel() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigError("tracing needs opentelemetry-api: pip install "
                          "'geogateway[tracing]'") from None
    return trace


def trace_context(message: Message | ReceivedMessage | PartitionEvent) -> Context | None:
    """The OpenTelemetry context ``message`` carries (its send's span), to start a span
    of one's own in that trace; None when it carries none.

    For callers of ``receive()``, who handle messages themselves::

        with tracer.start_as_current_span("handle", context=trace_context(m)): ...

    Raises:
        ConfigError: opentelemetry-api is not installed (the ``tracing`` extra).
    """
    trace = _otel()
    found = span_context(_message(message))
    if found is None:
        return None
    context: Context = trace.set_span_in_context(trace.NonRecordingSpan(found))
    return context


def _message(item: Message | ReceivedMessage | PartitionEvent) -> Message:
    return item if isinstance(item, Message) else item.message


class _Otel:
    """The OpenTelemetry pieces a :class:`Tracing` works with, and the helpers its
    spans share."""

    def __init__(self, tracer_provider: TracerProvider | None) -> None:
        self.trace = trace = _otel()
        from opentelemetry import context

        from gateway import __version__

        self.tracer: Tracer = trace.get_tracer(
            "geogateway", __version__, tracer_provider=tracer_provider)
        self.kinds = trace.SpanKind
        self.context = context
        self.error = trace.StatusCode.ERROR

    def parent(self, message: Message) -> Context | None:
        found = span_context(message)
        if found is None:
            return None
        parent: Context = self.trace.set_span_in_context(self.trace.NonRecordingSpan(found))
        return parent

    def link(self, item: ReceivedMessage | PartitionEvent | Message, *,
             namespace: str | None = None, operation: str | None = None) -> Link | None:
        message = _message(item)
        found = span_context(message)
        if found is None:
            return None
        attributes = {"messaging.message.id": message.message_id}
        if namespace is not None:
            attributes["geogateway.namespace"] = namespace
        if operation is not None:
            attributes["messaging.operation.name"] = operation
        link: Link = self.trace.Link(found, attributes)
        return link

    def add_links(self, span: Span,
                  copies: Iterable[tuple[ReceivedMessage, str | None, str | None]]) -> None:
        """Link ``span`` to each copy's context (at most the SDK's default limit), with
        the copy's id, and its namespace and settlement when given (few attributes:
        the SDK checks each one, and this runs for every message)."""
        for copy, namespace, operation in itertools.islice(copies, _MAX_LINKS):
            found = span_context(copy.message)
            if found is None:
                continue
            attributes = {"messaging.message.id": copy.message.message_id}
            if namespace is not None:
                attributes["geogateway.namespace"] = namespace
            if operation is not None:
                attributes["messaging.operation.name"] = operation
            span.add_link(found, attributes)


class Tracing(GatewayHooks, MessageTracer):
    """Hooks that trace messages with OpenTelemetry (give them in ``hooks=``).

    Only ``opentelemetry-api`` is needed; spans go wherever the application's
    OpenTelemetry SDK sends them (without an SDK they are no-ops).

    Args:
        tracer_provider: the ``TracerProvider`` to use (default: the global one).

    Raises:
        ConfigError: opentelemetry-api is not installed (the ``tracing`` extra).
    """

    def __init__(self, *, tracer_provider: TracerProvider | None = None) -> None:
        self._otel = _Otel(tracer_provider)

    def __repr__(self) -> str:
        return "Tracing()"

    # -- the seam ---------------------------------------------------------------------

    def send(self, *, system: str, entity: str, messages: Sequence[Message],
             replay: bool = False) -> SendTrace:
        name, base = _send_base(system, entity, replay)
        if len(messages) == 1:
            attributes = {**base, "messaging.message.id": messages[0].message_id}
        else:
            attributes = {**base, "messaging.batch.message_count": len(messages)}
        return _SendSpan(self._otel, name, attributes, messages)

    def received(self, *, system: str, entity: str, namespace: str,
                 messages: Sequence[ReceivedMessage], started_ns: int) -> None:
        otel = self._otel
        attributes: dict[str, Any] = {
            **_base(system, entity, "receive", "receive"), "geogateway.namespace": namespace,
            "messaging.batch.message_count": len(messages)}
        span: Span = otel.tracer.start_span(f"receive {entity}", kind=otel.kinds.CONSUMER,
                                            attributes=attributes, start_time=started_ns)
        if span.is_recording():  # links only for a span that keeps them
            otel.add_links(span, ((m, None, None) for m in messages))
        span.end()

    def process(self, *, system: str, entity: str,
                message: ReceivedMessage | PartitionEvent,
                consumer_group: str | None = None) -> AbstractContextManager[object]:
        otel = self._otel
        attributes = _copy_attributes(system, entity, "process", "process", message,
                                      consumer_group)
        return otel.tracer.start_as_current_span(
            f"process {entity}", context=otel.parent(message.message),
            kind=otel.kinds.CONSUMER, attributes=attributes)

    def settled(self, *, systems: dict[str, str], entity: str,
                copies: Sequence[tuple[ReceivedMessage, str]],
                duplicates: Sequence[ReceivedMessage], started_ns: int) -> None:
        otel = self._otel
        if copies:
            operations = {how for _, how in copies}
            operation = operations.pop() if len(operations) == 1 else "settle"
            system = systems.get(copies[0][0].namespace, "")
            attributes = {**_base(system, entity, "settle", operation),
                          "messaging.batch.message_count": len(copies)}
            span: Span = otel.tracer.start_span(f"{operation} {entity}",
                                                kind=otel.kinds.CLIENT, attributes=attributes,
                                                start_time=started_ns)
            if span.is_recording():
                mixed = operation == "settle"  # else the span's own operation says it
                otel.add_links(span, ((m, m.namespace, how if mixed else None)
                                      for m, how in copies))
            span.end()
        for copy in duplicates:
            self._duplicate(systems.get(copy.namespace, ""), entity, copy, "settle",
                            "complete", None, started_ns)

    def skipped(self, *, system: str, entity: str, event: PartitionEvent,
                consumer_group: str | None = None) -> None:
        self._duplicate(system, entity, event, "process", "skip", consumer_group, None)

    # -- hooks: what happens during a send becomes an event of its span ---------------

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self._event("failover", {"geogateway.from_namespace": from_namespace,
                                 "geogateway.to_namespace": to_namespace})

    def on_namespace_down(self, *, namespace: str, error: BaseException) -> None:
        self._event("namespace down", {"geogateway.namespace": namespace,
                                       "exception.type": type(error).__name__})

    def on_buffered(self, *, destination: str, count: int) -> None:
        self._event("buffered", {"geogateway.destination": destination,
                                 "messaging.batch.message_count": count})

    def _event(self, name: str, attributes: dict[str, Any]) -> None:
        span = self._otel.trace.get_current_span()
        if span.is_recording():
            span.add_event(name, attributes)

    def _duplicate(self, system: str, entity: str, copy: ReceivedMessage | PartitionEvent,
                   kind: str, operation: str, consumer_group: str | None,
                   started_ns: int | None) -> None:
        otel = self._otel
        attributes = {**_copy_attributes(system, entity, kind, operation, copy, consumer_group),
                      "geogateway.duplicate": True}
        span: Span = otel.tracer.start_span(
            f"{operation} {entity}", context=otel.parent(copy.message),
            kind=otel.kinds.CLIENT if kind == "settle" else otel.kinds.CONSUMER,
            attributes=attributes, start_time=started_ns)
        span.add_event("duplicate suppressed", {"geogateway.namespace": copy.namespace})
        span.end()


@functools.lru_cache(maxsize=256)
def _base(system: str, entity: str, kind: str, operation: str) -> Mapping[str, Any]:
    """The attributes every span of an operation on an entity has (made once; copy it)."""
    return MappingProxyType({"messaging.system": system, "messaging.destination.name": entity,
                             "messaging.operation.type": kind,
                             "messaging.operation.name": operation})


def _copy_attributes(system: str, entity: str, kind: str, operation: str,
                     copy: ReceivedMessage | PartitionEvent,
                     consumer_group: str | None) -> dict[str, Any]:
    attributes = {**_base(system, entity, kind, operation),
                  "messaging.message.id": copy.message.message_id,
                  "geogateway.namespace": copy.namespace}
    if isinstance(copy, PartitionEvent):
        attributes["messaging.destination.partition.id"] = copy.partition_id
        if consumer_group is not None:
            attributes["messaging.consumer.group.name"] = consumer_group
    elif copy.delivery_count > 1:  # delivered before: worth a look
        attributes["messaging.servicebus.message.delivery_count"] = copy.delivery_count
    return attributes


@functools.lru_cache(maxsize=256)
def _send_base(system: str, entity: str, replay: bool) -> tuple[str, Mapping[str, Any]]:
    """The name and the attributes every send span to ``entity`` has (made once)."""
    base = _base(system, entity, "send", "send")
    if replay:
        base = MappingProxyType({**base, "geogateway.replay": True})
    return f"send {entity}", base


class _SendSpan(SendTrace):
    """The span of one send, current while the send runs (so that the hooks' events
    land on it), with the messages carrying its context.

    This runs for every send: the span and its attributes are the SDK's cost; what is
    done here beside them is kept to a few steps (no link is looked for in messages
    without properties, the context's properties are made once for all messages)."""

    def __init__(self, otel: _Otel, name: str, attributes: dict[str, Any],
                 messages: Sequence[Message]) -> None:
        self._otel = otel
        self._name = name
        self._attributes = attributes
        self._given = self.messages = messages
        self._span: Span | None = None
        self._token: object = None

    def __enter__(self) -> _SendSpan:
        otel, given = self._otel, self._given
        # A message that carries a context already (a replay, or the caller's own)
        # keeps it: the send span links to it instead.
        carried: dict[int, Link] = {}
        for m in given:
            if m.properties and (link := otel.link(m)) is not None:
                carried[id(m)] = link
        span = otel.tracer.start_span(
            self._name, kind=otel.kinds.PRODUCER, attributes=self._attributes,
            links=list(carried.values())[:_MAX_LINKS] if carried else None)
        self._span = span
        context = span.get_span_context()
        if not context.is_valid:  # a no-op span (no SDK): nothing to carry or make current
            return self
        if len(carried) < len(given):
            extra = context_properties(context)
            if carried:
                fresh = iter(with_properties([m for m in given if id(m) not in carried],
                                             extra))
                self.messages = [m if id(m) in carried else next(fresh) for m in given]
            else:
                self.messages = with_properties(given, extra)
        self._token = otel.context.attach(otel.trace.set_span_in_context(span))
        return self

    def finished(self, *, namespaces: tuple[str, ...], buffered: tuple[str, ...],
                 failed_over: bool, hedged: bool) -> None:
        span = self._span
        if span is None or not span.is_recording():
            return
        # Only what says something (the SDK checks every attribute it is given).
        attributes: dict[str, Any] = {"geogateway.namespaces": namespaces}
        if buffered:
            attributes["geogateway.buffered"] = buffered
        if failed_over:
            attributes["geogateway.failed_over"] = True
        if hedged:
            attributes["geogateway.hedged"] = True
        span.set_attributes(attributes)

    def __exit__(self, exc_type: type[BaseException] | None,
                 exc_value: BaseException | None, traceback: TracebackType | None) -> None:
        span, otel = self._span, self._otel
        if span is None:
            return
        if self._token is not None:
            otel.context.detach(self._token)
        if exc_value is not None and span.is_recording():
            span.record_exception(exc_value)
            span.set_status(otel.error, type(exc_value).__name__)
        span.end()
