"""What subscription rules need of a message sent through the emulator: its system
properties, read from its AMQP sections, and the edits of a rule's action written into
them (the local namespace's ``SectionsCodec``).

System properties by canonical name, from the properties section: ``MessageId``
(message-id), ``CorrelationId`` (correlation-id), ``To``, ``ReplyTo`` (reply-to),
``Label`` (subject), ``SessionId`` (group-id), ``ReplyToSessionId`` (reply-to-group-id),
``ContentType`` (content-type); ``PartitionKey`` from the ``x-opt-partition-key``
message annotation. Ids that are not strings (a UUID, a ulong, binary) read as text.

A topic's ``$management`` node answers every operation with ``amqp:not-implemented``:
scheduling through it (``schedule_messages`` on a topic sender) is not emulated, since
one message becomes a row per subscription and its cancellation would have to find
them all; a message with ``scheduled_enqueue_time_utc`` sent to a topic is held back in
every subscription as in a queue.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gateway.amqp import AmqpMessage, Properties, Symbol, decode_message, encode_message
from gateway.amqp.server import IncomingLink, Reply, app_property, status
from replication import PropertyValue

__all__ = ["AmqpSections", "refuse_topic_operation"]

_PARTITION_KEY = Symbol("x-opt-partition-key")
#: Canonical system property name → field of the properties section.
_FIELDS = {
    "MessageId": "message_id", "CorrelationId": "correlation_id", "To": "to",
    "ReplyTo": "reply_to", "Label": "subject", "SessionId": "group_id",
    "ReplyToSessionId": "reply_to_group_id", "ContentType": "content_type",
}


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str.__str__(value) if isinstance(value, str) else str(value)


class AmqpSections:
    """Reads and edits the AMQP sections a queue keeps beside a message's body."""

    def system_properties(self, sections: bytes) -> Mapping[str, PropertyValue]:
        """The system properties of a message, by canonical name."""
        msg = decode_message(sections)
        props = msg.properties or Properties()
        found: dict[str, PropertyValue] = {
            name: _text(getattr(props, attr)) for name, attr in _FIELDS.items()}
        key = (msg.message_annotations or {}).get(_PARTITION_KEY)
        if key is not None:
            found["PartitionKey"] = _text(key)
        return found

    def edit(self, sections: bytes, *, system: Mapping[str, PropertyValue],
             user_set: Mapping[str, PropertyValue], user_removed: Collection[str]) -> bytes:
        """``sections`` with the system and application properties an action changed."""
        msg = decode_message(sections)
        props = msg.properties or Properties()
        annotations: dict[Any, Any] = dict(msg.message_annotations or {})
        for name, value in system.items():
            if name == "PartitionKey":
                annotations[_PARTITION_KEY] = value
            else:
                setattr(props, _FIELDS[name], value)
        app = {k: v for k, v in (msg.application_properties or {}).items()
               if k not in user_removed}
        app.update(user_set)
        return encode_message(AmqpMessage(
            header=msg.header, message_annotations=annotations or None, properties=props,
            application_properties=app or None, sequence=msg.sequence, value=msg.value,
            footer=msg.footer))


async def refuse_topic_operation(_: IncomingLink, request: AmqpMessage) -> Reply:
    """The answer of a topic's ``$management`` node: not emulated, saying what to do."""
    operation = str(app_property(request, "operation"))
    return Reply(properties=status(
        501, f"operation {operation!r} on a topic is not emulated by the geogateway emulator: "
        "send messages with scheduled_enqueue_time_utc set instead of schedule_messages; "
        "peek and settle through a subscription", "amqp:not-implemented"))
