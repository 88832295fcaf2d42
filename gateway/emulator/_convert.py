"""Between AMQP messages on the wire and the local namespace's messages and events.

What the local namespace keeps of a message: the MessageId (properties.message-id,
as a string), the body (the data sections joined, or an amqp-value of binary or
string), the partition key (message annotation ``x-opt-partition-key``) and the
application properties whose values it can hold: strings, integers, floats,
booleans and null. Other values are converted where that loses nothing a reader
could rely on (a symbol or char to a string, a UUID to its string, a timestamp to
its milliseconds) and dropped otherwise (binary, lists, maps, described values).
Other properties (content type, subject, correlation id, time to live, ...) are not
kept.
"""

from __future__ import annotations

import uuid
from datetime import timezone
from typing import Any

from gateway.transports.base import PartitionEvent, ReceivedMessage
from replication import Message
from replication._message import PropertyValue

from ._amqp_message import AmqpMessage, Header, Properties, body_bytes
from ._codec import Described, Long, Symbol, Timestamp

__all__ = ["event_message", "lock_tag", "queue_message", "tag_token", "to_local"]

_SEQUENCE = Symbol("x-opt-sequence-number")
_ENQUEUED = Symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = Symbol("x-opt-locked-until")
_OFFSET = Symbol("x-opt-offset")
_PARTITION_KEY = Symbol("x-opt-partition-key")
_DEAD_LETTER_SOURCE = Symbol("x-opt-deadletter-source")
_UTC = timezone.utc


def _value(v: Any) -> PropertyValue | Described:
    """A property value the local namespace can hold, or a Described marker to drop it."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)  # Long, UInt, Timestamp, ... are ints
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str.__str__(v)  # Symbol, Char
    if isinstance(v, uuid.UUID):
        return str(v)
    return Described(None, None)


def to_local(msg: AmqpMessage, *, key: str | None = None) -> Message:
    """The local namespace's message for ``msg``; ``key`` is the partition key fallback.

    Raises:
        TypeError: the body is an amqp-sequence or an amqp-value that is not binary or text.
    """
    props = msg.properties
    mid = props.message_id if props is not None else None
    annotations = msg.message_annotations or {}
    found = annotations.get(_PARTITION_KEY, key)
    if isinstance(found, bytes):
        found = found.decode("utf-8", "replace")
    properties: dict[str, PropertyValue] = {}
    for k, v in (msg.application_properties or {}).items():
        value = _value(v)
        if isinstance(k, str) and not isinstance(value, Described):
            properties[str.__str__(k)] = value
    return Message(
        body=body_bytes(msg),
        message_id=None if mid is None else _text(mid),
        partition_key=found if isinstance(found, str) else None,
        properties=properties,
    )


def _text(mid: object) -> str:
    if isinstance(mid, bytes):
        return mid.hex()
    return str(mid)


def lock_tag(lock_token: str) -> bytes:
    """The delivery tag of a lock token: the SDKs read the tag as a little-endian UUID."""
    return uuid.UUID(hex=lock_token).bytes_le


def tag_token(tag: uuid.UUID | bytes) -> str:
    """The store's lock token of a delivery tag or of a lock token the SDK sent back."""
    return (tag if isinstance(tag, uuid.UUID) else uuid.UUID(bytes_le=bytes(tag))).hex


def _ms(seconds: float) -> Timestamp:
    return Timestamp(round(seconds * 1000))


def queue_message(r: ReceivedMessage, *, dead_letter_source: str | None = None) -> AmqpMessage:
    """The wire form of a message received from a queue (or peeked: no lock)."""
    annotations: dict[Any, Any] = {
        _SEQUENCE: Long(r.sequence_number),
        _ENQUEUED: _ms(r.enqueued_time),
    }
    if r.locked_until is not None:
        annotations[_LOCKED_UNTIL] = _ms(r.locked_until)
    if r.message.partition_key is not None:
        annotations[_PARTITION_KEY] = r.message.partition_key
    if dead_letter_source is not None:
        annotations[_DEAD_LETTER_SOURCE] = dead_letter_source
    return AmqpMessage(
        # Service Bus counts deliveries from 1; the AMQP header counts failed ones.
        header=Header(delivery_count=max(0, r.delivery_count - 1)),
        message_annotations=annotations,
        properties=Properties(message_id=r.message_id),
        application_properties=dict(r.message.properties) or None,
        data=[r.message.body],
    )


def event_message(e: PartitionEvent) -> AmqpMessage:
    """The wire form of an event read from a partition."""
    annotations: dict[Any, Any] = {
        _SEQUENCE: Long(e.sequence_number),
        _OFFSET: str(e.offset),
        _ENQUEUED: _ms(e.enqueued_time),
    }
    if e.message.partition_key is not None:
        annotations[_PARTITION_KEY] = e.message.partition_key
    return AmqpMessage(
        message_annotations=annotations,
        properties=Properties(message_id=e.message.message_id),
        application_properties=dict(e.message.properties) or None,
        data=[e.message.body],
    )
