"""The message record shared by every package."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from replication._errors import MessageRejected

__all__ = ["Message", "PropertyValue", "with_properties"]

PropertyValue = str | int | float | bool | None
"""What an application property may hold: ``str``, ``int``, ``float``, ``bool`` or ``None``."""

_EMPTY: Mapping[str, PropertyValue] = MappingProxyType({})


@dataclass(frozen=True, eq=True, init=False)
class Message:
    """One application message.

    Args:
        body: the payload; ``str`` is encoded as UTF-8.
        message_id: the id that de-duplication keys on; generated (a UUID4 hex) when
            not given. Both copies of a replicated message carry the same id.
        partition_key: routes the message to a partition of a partitioned entity.
        properties: application properties (string keys, scalar values).
        session_id: the session the message belongs to (Service Bus ``SessionId``): a
            session-enabled queue hands a session's messages to one receiver at a time,
            in order. ``GeoSender`` stamps each with its position in the session.

    Raises:
        TypeError: a body, id, key or property name of the wrong type.
        MessageRejected: a string that is not valid Unicode (a lone surrogate, as
            ``os.fsdecode`` makes of bytes that are not UTF-8), or a property value
            that is not a scalar (a dict, a list, bytes...): no namespace can carry
            either.
    """

    body: bytes
    message_id: str
    partition_key: str | None
    properties: Mapping[str, PropertyValue]
    session_id: str | None

    def __init__(
        self,
        body: bytes | bytearray | memoryview | str,
        message_id: str | None = None,
        partition_key: str | None = None,
        properties: Mapping[str, PropertyValue] | None = None,
        session_id: str | None = None,
    ) -> None:
        if isinstance(body, str):
            body = _utf8(body, "the body")
        elif isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"Message body must be bytes or str, not {type(body).__name__}")
        if not message_id:
            message_id = uuid.uuid4().hex
        elif not isinstance(message_id, str):
            raise TypeError(f"message_id must be a str, not {type(message_id).__name__}")
        elif not message_id.isascii():  # isascii() is O(1): the common case costs nothing
            _utf8(message_id, "message_id")
        if partition_key is not None:
            if not isinstance(partition_key, str):
                raise TypeError(
                    f"partition_key must be a str, not {type(partition_key).__name__}")
            if not partition_key.isascii():
                _utf8(partition_key, "partition_key")
        if session_id is not None:
            if not isinstance(session_id, str):
                raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
            if not session_id.isascii():
                _utf8(session_id, "session_id")
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "message_id", message_id)
        object.__setattr__(self, "partition_key", partition_key)
        object.__setattr__(self, "properties", _checked(properties) if properties else _EMPTY)
        object.__setattr__(self, "session_id", session_id)

    def __hash__(self) -> int:
        return hash(self.message_id)

    def __reduce__(self) -> tuple[object, ...]:
        # The read-only properties view (a mappingproxy) cannot be pickled or
        # deep-copied; rebuild from a plain dict, which __post_init__ wraps again.
        return (
            type(self),
            (self.body, self.message_id, self.partition_key, dict(self.properties),
             self.session_id),
        )

    @property
    def size(self) -> int:
        """Approximate size on the wire in bytes (body, id, key, session and properties)."""
        n = len(self.body) + len(self.message_id) + len(self.partition_key or "")
        n += len(self.session_id or "")
        for key, value in self.properties.items():
            n += len(key) + len(str(value))
        return n

    def __repr__(self) -> str:
        return (
            f"Message(message_id={self.message_id!r}, body=<{len(self.body)} bytes>, "
            f"partition_key={self.partition_key!r}"
            + (f", session_id={self.session_id!r})" if self.session_id is not None else ")")
        )


def with_properties(
    messages: Sequence[Message], extra: Mapping[str, PropertyValue]
) -> list[Message]:
    """Copies of ``messages`` with ``extra`` added to their properties (over the same
    names); the same id, body, key and session. ``extra`` is checked once for all of them.

    Raises:
        TypeError, MessageRejected: as ``Message`` does for a bad property.
    """
    checked = _checked(extra)
    out = []
    for message in messages:
        properties = (MappingProxyType({**message.properties, **checked})
                      if message.properties else checked)
        copy = object.__new__(Message)
        object.__setattr__(copy, "body", message.body)
        object.__setattr__(copy, "message_id", message.message_id)
        object.__setattr__(copy, "partition_key", message.partition_key)
        object.__setattr__(copy, "session_id", message.session_id)
        object.__setattr__(copy, "properties", properties)
        out.append(copy)
    return out


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8; ``MessageRejected`` (not UnicodeEncodeError) when it cannot be."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        hint = "pass bytes or valid UTF-8 text" if what == "the body" else "use valid text"
        raise MessageRejected(
            f"{what} is not valid Unicode (a lone surrogate {text[exc.start]!r} at "
            f"position {exc.start}): {hint}"
        ) from None


def _checked(properties: Mapping[str, PropertyValue]) -> Mapping[str, PropertyValue]:
    props = dict(properties)
    for key, value in props.items():
        if not isinstance(key, str):
            raise TypeError(f"property names must be str, not {type(key).__name__}")
        if not key.isascii():  # O(1): ASCII text is valid UTF-8, nothing to encode
            _utf8(key, "a property name")
        if isinstance(value, str):
            if not value.isascii():
                _utf8(value, f"property {key!r}")
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            # Application properties are flat (AMQP allows no map or list there):
            # data, not a programming error, so rejected like an oversized message.
            raise MessageRejected(
                f"property {key!r} is a {type(value).__name__}: a property value must be "
                "str, int, float, bool or None (send nested data as JSON text)"
            )
    return MappingProxyType(props)
