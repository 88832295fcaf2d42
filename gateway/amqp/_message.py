"""The AMQP 1.0 message format for the geogateway emulator: sections, encode and decode.

A message is a sequence of described sections: header, delivery-annotations,
message-annotations, properties, application-properties, a body (data sections, or
amqp-sequence sections, or one amqp-value) and a footer. ``AmqpMessage.value`` is
``NO_VALUE`` when there is no amqp-value section, since None is a valid amqp-value.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway.amqp._codec import (
    Buffer,
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    decode,
    decode_described_value,
    encode_into,
)

__all__ = [
    "BATCH_FORMAT",
    "NO_VALUE",
    "AmqpMessage",
    "Header",
    "Properties",
    "body_bytes",
    "decode_message",
    "decode_spans",
    "encode_message",
    "split_batch",
    "split_sections",
]

#: The transfer message-format of a batch: each data section is one encoded message.
BATCH_FORMAT = 0x80013700


class _NoValue(enum.Enum):
    NO_VALUE = "NO_VALUE"

    def __repr__(self) -> str:
        return "NO_VALUE"


#: ``AmqpMessage.value`` when the message has no amqp-value section.
NO_VALUE = _NoValue.NO_VALUE


@dataclass
class Header:
    """The header section, with the spec's defaults. ``ttl`` is in milliseconds."""

    durable: bool = False
    priority: int = 4
    ttl: int | None = None
    first_acquirer: bool = False
    delivery_count: int = 0


@dataclass
class Properties:
    """The properties section. Message and correlation ids keep their type (str, ULong,
    uuid.UUID or bytes; a plain int is written as ULong). Times are ``Timestamp``s
    (a plain int or a datetime is accepted when encoding)."""

    message_id: object = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: object = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: int | datetime | None = None
    creation_time: int | datetime | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None


@dataclass
class AmqpMessage:
    """A decoded message; sections that are absent are None (``value``: ``NO_VALUE``)."""

    header: Header | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[Any, Any] | None = None
    data: list[bytes] | None = None
    sequence: list[list[Any]] | None = None
    value: object = NO_VALUE
    footer: dict[Any, Any] | None = None

    @property
    def has_value(self) -> bool:
        """Whether the message has an amqp-value section."""
        return self.value is not NO_VALUE


# --- encoding -----------------------------------------------------------------------

# Every section is 0x00, then its descriptor as a smallulong, then the value.
_PREFIXES = {code: bytes((0x00, 0x53, code)) for code in range(0x70, 0x79)}


def _annotations(section: Mapping[Any, Any]) -> dict[Any, Any]:
    # str.__new__ skips Symbol's ASCII check, which encoding the symbol repeats anyway.
    return {
        str.__new__(Symbol, k) if type(k) is str else ULong(k) if type(k) is int else k: v
        for k, v in section.items()
    }


def _message_id(value: object) -> object:
    return ULong(value) if type(value) is int else value


def _timestamp(value: int | datetime | None) -> Timestamp | None:
    if value is None or type(value) is Timestamp:
        return value
    if isinstance(value, datetime):
        return Timestamp.from_datetime(value)
    return Timestamp(value)


def _string(value: object) -> object:
    # A Symbol in a string field is written as a string; other types are left alone.
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def _key(value: object) -> str:
    # Application property keys are strings, never symbols.
    if not isinstance(value, str):
        raise TypeError(f"application property keys are str, not {value!r}")
    return value if type(value) is str else str.__str__(value)


def _typed(make: Callable[[Any], object], value: object) -> object:
    return None if value is None else make(value)


def _header_list(h: Header) -> list[object]:
    return [
        bool(h.durable),
        _typed(UByte, h.priority),
        _typed(UInt, h.ttl),
        bool(h.first_acquirer),
        _typed(UInt, h.delivery_count),
    ]


def _properties_list(p: Properties) -> list[object]:
    return [
        _message_id(p.message_id),
        p.user_id.encode() if isinstance(p.user_id, str) else p.user_id,
        _string(p.to),
        _string(p.subject),
        _string(p.reply_to),
        _message_id(p.correlation_id),
        _typed(Symbol, p.content_type),
        _typed(Symbol, p.content_encoding),
        _timestamp(p.absolute_expiry_time),
        _timestamp(p.creation_time),
        _string(p.group_id),
        _typed(UInt, p.group_sequence),
        _string(p.reply_to_group_id),
    ]


def encode_message(msg: AmqpMessage) -> bytes:
    """The encoded sections of ``msg``, in spec order; header and properties in full.

    Annotation keys given as ``str`` are written as symbols and ``int`` ones as ulongs.

    Raises:
        TypeError, ValueError: a section holds a value without an AMQP encoding.
    """
    buf = bytearray()

    def section(code: int, value: object) -> None:
        buf.extend(_PREFIXES[code])
        encode_into(buf, value)

    if msg.header is not None:
        section(0x70, _header_list(msg.header))
    if msg.delivery_annotations is not None:
        section(0x71, _annotations(msg.delivery_annotations))
    if msg.message_annotations is not None:
        section(0x72, _annotations(msg.message_annotations))
    if msg.properties is not None:
        section(0x73, _properties_list(msg.properties))
    if msg.application_properties is not None:
        section(0x74, {_key(k): v for k, v in msg.application_properties.items()})
    for chunk in msg.data or ():
        if not isinstance(chunk, bytes | bytearray | memoryview):
            raise TypeError(f"a data section holds bytes, not {chunk!r}")
        section(0x75, chunk)
    for items in msg.sequence or ():
        section(0x76, items)
    if msg.value is not NO_VALUE:
        section(0x77, msg.value)
    if msg.footer is not None:
        section(0x78, _annotations(msg.footer))
    return bytes(buf)


# --- decoding -----------------------------------------------------------------------


def _list_of(value: object, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise DecodeError(f"the {name} section is not a list: {value!r}")
    return value


def _map_of(value: object, name: str) -> dict[Any, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise DecodeError(f"the {name} section is not a map: {value!r}")
    return value


def _field(value: object, default: object, kind: type[Any]) -> Any:
    # A null field means the field's default; bool is an int, so int fields refuse it.
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DecodeError(f"header field {value!r} is not of type {kind.__name__}")
    return value


def _header(value: object) -> Header:
    durable, priority, ttl, first_acquirer, count = (_list_of(value, "header") + [None] * 5)[:5]
    return Header(
        durable=_field(durable, False, bool),
        priority=_field(priority, 4, int),
        ttl=_field(ttl, None, int),
        first_acquirer=_field(first_acquirer, False, bool),
        delivery_count=_field(count, 0, int),
    )


def _properties(value: object) -> Properties:
    return Properties(*_list_of(value, "properties")[:13])


def _apply(msg: AmqpMessage, code: int, value: object) -> None:
    if code == 0x70:
        msg.header = _header(value)
    elif code == 0x71:
        msg.delivery_annotations = _map_of(value, "delivery-annotations")
    elif code == 0x72:
        msg.message_annotations = _map_of(value, "message-annotations")
    elif code == 0x73:
        msg.properties = _properties(value)
    elif code == 0x74:
        msg.application_properties = _map_of(value, "application-properties")
    elif code == 0x75:
        if not isinstance(value, bytes):
            raise DecodeError(f"a data section is not binary: {value!r}")
        if msg.data is None:
            msg.data = []
        msg.data.append(value)
    elif code == 0x76:
        if msg.sequence is None:
            msg.sequence = []
        msg.sequence.append(_list_of(value, "amqp-sequence"))
    elif code == 0x77:
        msg.value = value
    else:
        msg.footer = _map_of(value, "footer")


_SECTION_NAMES = {
    "amqp:header:list": 0x70,
    "amqp:delivery-annotations:map": 0x71,
    "amqp:message-annotations:map": 0x72,
    "amqp:properties:list": 0x73,
    "amqp:application-properties:map": 0x74,
    "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76,
    "amqp:amqp-value:*": 0x77,
    "amqp:footer:map": 0x78,
}


def _section_code(descriptor: object) -> int:
    if isinstance(descriptor, str):
        code = _SECTION_NAMES.get(descriptor, -1)
    elif isinstance(descriptor, int) and not isinstance(descriptor, bool):
        code = int(descriptor)
    else:
        code = -1
    if not 0x70 <= code <= 0x78:
        raise DecodeError(f"not a message section descriptor: {descriptor!r}")
    return code


def _section_at(payload: bytes, p: int) -> tuple[int, object, int]:
    # The value at p as (section code, its value, end) when it is written as sections
    # are (``0x00 0x53 CODE`` and a value); otherwise (-1, what decode gives, end).
    if payload[p] == 0x00 and p + 3 < len(payload) and payload[p + 1] == 0x53 and (
            0x70 <= payload[p + 2] <= 0x78):
        value, q = decode_described_value(payload, p + 3)
        return payload[p + 2], value, q
    value, q = decode(payload, p)
    return -1, value, q


def _section(code: int, value: object) -> tuple[int, object]:
    # (code, value) of a value _section_at read in another form: a Described section.
    if code >= 0:
        return code, value
    if not isinstance(value, Described):
        raise DecodeError(f"a message holds sections, not {value!r}")
    return _section_code(value.descriptor), value.value


def decode_message(payload: Buffer) -> AmqpMessage:
    """Decode the sections of a message (in any order; repeated ones: the last wins,
    except data and amqp-sequence sections, which accumulate).

    Raises:
        DecodeError: the payload is malformed or holds something other than sections.
    """
    data = payload if isinstance(payload, bytes) else bytes(payload)
    found, p, end = [], 0, len(data)
    while p < end:  # every value is decoded before any is checked, as always
        code, value, p = _section_at(data, p)
        found.append((code, value))
    msg = AmqpMessage()
    for code, value in found:
        _apply(msg, *_section(code, value))
    return msg


def decode_spans(payload: bytes) -> tuple[AmqpMessage, list[tuple[int, int, int]]]:
    """As :func:`decode_message`, with where each section is: (code, start, end).

    Raises:
        DecodeError: the payload is malformed or holds something other than sections.
    """
    msg, spans = AmqpMessage(), []
    p, end = 0, len(payload)
    while p < end:
        code, value, q = _section_at(payload, p)
        code, value = _section(code, value)
        _apply(msg, code, value)
        spans.append((code, p, q))
        p = q
    return msg, spans


def split_sections(blob: bytes) -> list[tuple[int, bytes]] | None:
    """The sections of ``blob`` as (code, encoded section), found without decoding them.

    Only sections written as ``encode_message`` and the Azure SDKs write them (a
    small-ulong descriptor, then a list or a map) are recognised; for anything else
    the answer is None, and the caller decodes instead.
    """
    out: list[tuple[int, bytes]] = []
    p, n = 0, len(blob)
    while p < n:
        if p + 4 > n or blob[p] != 0x00 or blob[p + 1] != 0x53:
            return None
        constructor = blob[p + 3]
        if constructor == 0x45:  # list0
            q = p + 4
        elif constructor in (0xC0, 0xC1) and p + 5 <= n:
            q = p + 5 + blob[p + 4]
        elif constructor in (0xD0, 0xD1) and p + 8 <= n:
            q = p + 8 + int.from_bytes(blob[p + 4:p + 8], "big")
        else:
            return None
        if q > n:
            return None
        out.append((blob[p + 2], blob[p:q]))
        p = q
    return out


def split_batch(msg: AmqpMessage) -> list[AmqpMessage]:
    """The messages of a batch (message-format ``BATCH_FORMAT``): one per data section.

    Raises:
        DecodeError: a data section is not an encoded message.
    """
    return [decode_message(chunk) for chunk in msg.data or ()]


def body_bytes(msg: AmqpMessage) -> bytes:
    """The body as bytes: the data sections joined, or an amqp-value of bytes or str
    (as UTF-8); ``b""`` for a message without a body.

    Raises:
        TypeError: the body is an amqp-sequence or an amqp-value of another type.
    """
    if msg.data is not None:
        return b"".join(msg.data)
    if isinstance(msg.value, bytes):
        return msg.value
    if isinstance(msg.value, str):
        return msg.value.encode()
    if msg.value is NO_VALUE and msg.sequence is None:
        return b""
    raise TypeError("the message body is not binary data")
