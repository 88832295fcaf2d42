"""Conversions between the SDKs' values and the project's records (times, offsets, properties).

Datetimes, string offsets, AMQP property values and body sections become what
:class:`~replication.Message` and the transport records hold, and back.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.transports.base import EventPosition
from replication import PropertyValue

__all__ = [
    "amqp_properties",
    "body_bytes",
    "epoch_seconds",
    "parse_offset",
    "properties_from",
    "scalar",
    "starting_position",
    "text_or_none",
]


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
