"""Between AMQP messages on the wire and the local namespace's messages and events.

What ``local://`` readers see of a message (:func:`to_local`): the MessageId
(properties.message-id, as a string), the SessionId (properties.group-id), the body
(the data sections joined, or an amqp-value of binary or string), the partition key
(message annotation ``x-opt-partition-key``) and the application properties whose
values it can hold:
strings, integers, floats, booleans and null. Other values are converted where that
loses nothing a reader could rely on (a symbol or char to a string, a UUID to its
string, a timestamp to its milliseconds) and left out otherwise (binary, lists,
maps, described values).

A queue message sent by an AMQP client keeps everything else beside it
(:func:`to_queued`): its header, message annotations, properties, application
properties and footer, encoded as they came, so that an AMQP receiver gets every
property and every application property back with its AMQP type. A body that is not
data sections (an amqp-value, amqp-sequence sections) is kept there too, and a
message sent without a body is marked so (annotation :data:`NO_BODY`, never sent
back): both come back as they were sent. ``local://`` readers see such a body as its
bytes when it is an amqp-value of binary or text, and as empty otherwise. A message's
scheduled enqueue time (annotation ``x-opt-scheduled-enqueue-time``) and time to live
(``header.ttl``) are applied by the queue. An event sent by an AMQP client keeps its
sections the same way (:func:`event_message`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timezone
from typing import Any

from gateway.amqp import (
    AmqpMessage,
    Described,
    Header,
    Int,
    Long,
    Properties,
    Symbol,
    Timestamp,
    body_bytes,
    decode_message,
    decode_spans,
    encode_message,
    split_sections,
)
from gateway.transports import Queued
from gateway.transports.base import PartitionEvent, ReceivedMessage
from replication import Message, PropertyValue

__all__ = ["DEFERRED", "NO_BODY", "SCHEDULED_STATE", "event_message", "lock_tag",
           "queue_message", "queue_payload", "tag_token", "to_local", "to_queued"]

_SEQUENCE = Symbol("x-opt-sequence-number")
_ENQUEUED = Symbol("x-opt-enqueued-time")
_LOCKED_UNTIL = Symbol("x-opt-locked-until")
_OFFSET = Symbol("x-opt-offset")
_PARTITION_KEY = Symbol("x-opt-partition-key")
_DEAD_LETTER_SOURCE = Symbol("x-opt-deadletter-source")
SCHEDULED = Symbol("x-opt-scheduled-enqueue-time")
_STATE = Symbol("x-opt-message-state")
_LOCK_TOKEN = Symbol("x-opt-lock-token")
#: The stored mark of a message sent without a body (a data section of no bytes is a
#: body); the emulator's own, removed before the message is sent on.
NO_BODY = Symbol("x-geogateway-no-body")
# The sections a queue keeps beside the body: header, message annotations, properties,
# application properties, footer (delivery annotations are for one hop only), and a
# body that is not data sections.
_KEPT = frozenset((0x70, 0x72, 0x73, 0x74, 0x76, 0x77, 0x78))
_HEADER, _ANNOTATIONS, _FOOTER = 0x70, 0x72, 0x78
_BODY_SECTIONS = frozenset((0x76, 0x77))
#: The application properties a queue adds to a message (when it dead-letters it).
_ADDED = ("DeadLetterReason", "DeadLetterErrorDescription")
#: ``x-opt-message-state``: 0 active (left out, as the service does), 1 deferred,
#: 2 scheduled (a message waiting for its scheduled time).
DEFERRED, SCHEDULED_STATE = Int(1), Int(2)
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
    return _local(msg, key, body_bytes(msg))


def _kept_body(msg: AmqpMessage) -> bytes:
    """What ``local://`` readers see of a body kept in the sections (module docstring)."""
    return msg.value if isinstance(msg.value, bytes) else (
        msg.value.encode() if isinstance(msg.value, str) else b"")


def _local(msg: AmqpMessage, key: str | None, body: bytes) -> Message:
    props = msg.properties
    mid = props.message_id if props is not None else None
    group = props.group_id if props is not None else None
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
        body=body,
        message_id=None if mid is None else _text(mid),
        partition_key=found if isinstance(found, str) else None,
        properties=properties,
        session_id=str.__str__(group) if isinstance(group, str) else None,
    )


def to_queued(payload: bytes) -> Queued:
    """The queue message for an encoded message: :func:`to_local`, and its other sections.

    The sections other than the body and the delivery annotations are kept as they
    came on the wire (re-encoded only when a client wrote them in an unusual form).

    Raises:
        DecodeError: the payload is not a message.
        TypeError, ValueError: the body is not binary or text, or a section cannot be
            encoded again.
    """
    msg, spans = decode_spans(payload)
    kept = [(code, start, end) for code, start, end in spans if code in _KEPT]
    no_body = msg.data is None and msg.sequence is None and not msg.has_value
    # Copied as they came when each is there once (amqp-sequence sections may repeat).
    single = [code for code, _, _ in kept if code != 0x76]
    if not no_body and len(set(single)) == len(single) and all(
            payload[start + 1] == 0x53 for _, start, _ in kept):
        sections = b"".join(payload[start:end] for _, start, end in kept)
    else:
        annotations = msg.message_annotations
        if no_body:
            annotations = {**(annotations or {}), NO_BODY: True}
        sections = encode_message(AmqpMessage(
            header=msg.header, message_annotations=annotations,
            properties=msg.properties, application_properties=msg.application_properties,
            sequence=msg.sequence, value=msg.value, footer=msg.footer))
    scheduled = (msg.message_annotations or {}).get(SCHEDULED)
    ttl = msg.header.ttl if msg.header is not None else None
    body = body_bytes(msg) if msg.data is not None else _kept_body(msg)
    return Queued(
        message=_local(msg, None, body), sections=sections,
        scheduled_time=scheduled / 1000 if isinstance(scheduled, int) and not isinstance(
            scheduled, bool) else None,
        time_to_live=ttl / 1000 if ttl else None)


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


def queue_message(r: ReceivedMessage, *, sections: bytes | None = None,
                  dead_letter_source: str | None = None, state: Int | None = None,
                  delivered: bool = False) -> AmqpMessage:
    """The wire form of a message received from a queue (or peeked: no lock).

    ``sections`` are the message's own (see :func:`to_queued`); the broker's
    annotations and delivery count are written over them. ``state``: the message's
    ``x-opt-message-state`` when it is not active (:data:`DEFERRED`,
    :data:`SCHEDULED_STATE`). ``delivered``: a transfer on a receiver link, whose
    delivery annotations carry the lock token (beside the delivery tag) as the service's do.
    """
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
    if state is not None:
        annotations[_STATE] = state
    # Service Bus counts deliveries from 1; the AMQP header counts failed ones.
    failed = max(0, r.delivery_count - 1)
    delivery = ({_LOCK_TOKEN: uuid.UUID(hex=r.lock_token)}
                if delivered and r.lock_token is not None else None)
    if sections is None:
        return AmqpMessage(
            header=Header(delivery_count=failed), delivery_annotations=delivery,
            message_annotations=annotations,
            properties=Properties(message_id=r.message_id, group_id=r.message.session_id),
            application_properties=dict(r.message.properties) or None,
            data=[r.message.body],
        )
    sent = decode_message(sections)
    header = sent.header or Header()
    header.delivery_count = failed
    own = dict(sent.message_annotations or {})
    kept_body = own.pop(NO_BODY, None) is not None or sent.has_value or (
        sent.sequence is not None)
    return AmqpMessage(
        header=header, delivery_annotations=delivery,
        message_annotations={**own, **annotations},
        properties=sent.properties,
        application_properties=_merged(sent.application_properties, r.message.properties),
        data=None if kept_body else [r.message.body],
        sequence=sent.sequence, value=sent.value,
        footer=sent.footer,
    )


def queue_payload(r: ReceivedMessage, *, sections: bytes | None = None,
                  dead_letter_source: str | None = None, state: Int | None = None,
                  delivered: bool = False) -> bytes:
    """``encode_message(queue_message(...))``, quicker: the message's own properties,
    application properties and footer are copied as stored, not decoded and encoded."""
    parts = split_sections(sections) if sections is not None else None
    if parts is None or (any(k in r.message.properties for k in _ADDED)):
        return encode_message(queue_message(r, sections=sections, state=state,
                                            dead_letter_source=dead_letter_source,
                                            delivered=delivered))
    own = decode_message(b"".join(raw for code, raw in parts if code in (_HEADER, _ANNOTATIONS)))
    wire = queue_message(r, dead_letter_source=dead_letter_source, state=state,
                         delivered=delivered)
    assert wire.header is not None and wire.message_annotations is not None
    header = own.header or Header()
    header.delivery_count = wire.header.delivery_count
    annotations = own.message_annotations or {}
    no_body = annotations.pop(NO_BODY, None) is not None
    head = AmqpMessage(header=header, delivery_annotations=wire.delivery_annotations,
                       message_annotations={**annotations, **wire.message_annotations})
    middle = [raw for code, raw in parts if code not in (_HEADER, _ANNOTATIONS, _FOOTER)]
    footer = [raw for code, raw in parts if code == _FOOTER]
    body = b"" if no_body or any(code in _BODY_SECTIONS for code, _ in parts) else (
        encode_message(AmqpMessage(data=[r.message.body])))
    return b"".join((encode_message(head), *middle, body, *footer))


def _merged(sent: dict[Any, Any] | None,
            kept: Mapping[str, PropertyValue]) -> dict[Any, Any] | None:
    """The application properties as sent, with what the queue added or changed
    (``DeadLetterReason``, ...) taken from the local message's properties."""
    out = dict(sent or {})
    for key, value in kept.items():
        if key not in out or _value(out[key]) != value:
            out[key] = value
    return out or None


def event_message(e: PartitionEvent, sections: bytes | None = None) -> AmqpMessage:
    """The wire form of an event read from a partition; ``sections``: the event's own
    (see :func:`to_queued`), kept as sent, with the partition's annotations over them."""
    annotations: dict[Any, Any] = {
        _SEQUENCE: Long(e.sequence_number),
        _OFFSET: str(e.offset),
        _ENQUEUED: _ms(e.enqueued_time),
    }
    if e.message.partition_key is not None:
        annotations[_PARTITION_KEY] = e.message.partition_key
    if sections is None:
        return AmqpMessage(
            message_annotations=annotations,
            properties=Properties(message_id=e.message.message_id,
                                  group_id=e.message.session_id),
            application_properties=dict(e.message.properties) or None,
            data=[e.message.body],
        )
    sent = decode_message(sections)
    own = dict(sent.message_annotations or {})
    kept_body = own.pop(NO_BODY, None) is not None or sent.has_value or (
        sent.sequence is not None)
    return AmqpMessage(
        header=sent.header, message_annotations={**own, **annotations},
        properties=sent.properties, application_properties=sent.application_properties,
        data=None if kept_body else [e.message.body],
        sequence=sent.sequence, value=sent.value, footer=sent.footer,
    )