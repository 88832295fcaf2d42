"""The tracing seam of the geo core: what the sender and the receivers ask of a tracer.

:class:`gateway.observability.Tracing` implements it with OpenTelemetry. The core
looks for it among its hooks once, when it is made (:func:`find_tracer`); without
one it holds ``None`` and pays for nothing but that check.

Only the core's vocabulary crosses the seam (messages, received copies, events,
namespaces); spans, contexts and propagation stay on the other side.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType

from gateway.transports.base import PartitionEvent, ReceivedMessage, Transport
from replication import Message

__all__ = ["LOCAL_SYSTEM", "MessageTracer", "SendTrace", "find_tracer", "messaging_system"]

#: ``messaging.system`` of the embedded local namespaces (``local://NAME``).
LOCAL_SYSTEM = "geogateway_local"

_SYSTEMS = {"servicebus": "servicebus", "eventhubs": "eventhubs", "local": LOCAL_SYSTEM}


def messaging_system(transport: Transport) -> str:
    """The ``messaging.system`` of ``transport``'s namespace: ``servicebus``,
    ``eventhubs`` (the Azure SDK transports, the emulator's included),
    :data:`LOCAL_SYSTEM` for local namespaces, else the scheme of its identity."""
    scheme = transport.identity.partition("://")[0]
    return _SYSTEMS.get(scheme, scheme)


class SendTrace:
    """One traced send, used as ``with tracer.send(...) as trace:``.

    ``messages`` are the messages to send: the ones given, with the trace context
    added to their properties. The core calls :meth:`finished` before the block ends
    when the send returned; an exception leaving the block is the send's error.
    """

    messages: Sequence[Message]

    def __enter__(self) -> SendTrace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def finished(self, *, namespaces: tuple[str, ...], buffered: tuple[str, ...],
                 failed_over: bool, hedged: bool) -> None:
        """What the send did: where the messages were accepted or buffered."""


class MessageTracer:
    """What the geo core asks of a tracer. A hook that is one (an instance of a
    subclass) is the tracer of the sender or receiver it is given to."""

    def send(self, *, system: str, entity: str, messages: Sequence[Message],
             replay: bool = False) -> SendTrace:
        """Trace one send (a replay's batch with ``replay``) of ``messages``."""
        raise NotImplementedError()  # pragma: no cover

    def received(self, *, system: str, entity: str, namespace: str,
                 messages: Sequence[ReceivedMessage], started_ns: int) -> None:
        """One receive from ``namespace`` returned ``messages`` (never empty); it
        began at ``started_ns`` (``time.time_ns()``)."""

    def process(self, *, system: str, entity: str,
                message: ReceivedMessage | PartitionEvent,
                consumer_group: str | None = None) -> AbstractContextManager[object]:
        """Trace the handling of one message or event (the handler runs inside)."""
        raise NotImplementedError()  # pragma: no cover

    def settled(self, *, systems: dict[str, str], entity: str,
                copies: Sequence[tuple[ReceivedMessage, str]],
                duplicates: Sequence[ReceivedMessage], started_ns: int) -> None:
        """A group of copies was settled together (``how`` each: ``"complete"``,
        ``"abandon"``); ``duplicates`` were completed as duplicates, not delivered.
        ``systems``: each namespace's ``messaging.system``."""

    def skipped(self, *, system: str, entity: str, event: PartitionEvent,
                consumer_group: str | None = None) -> None:
        """An event whose ``MessageId`` was done already was not handed to the
        handler (a duplicate suppressed by the geo partition receiver)."""


def find_tracer(hooks: Iterable[object]) -> MessageTracer | None:
    """The first of ``hooks`` that is a :class:`MessageTracer`, or None."""
    return next((h for h in hooks if isinstance(h, MessageTracer)), None)
