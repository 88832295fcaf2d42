"""The message record shared by every package."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Union

__all__ = ["Message", "PropertyValue"]

PropertyValue = Union[str, int, float, bool, None]

_EMPTY: Mapping[str, PropertyValue] = MappingProxyType({})


@dataclass(frozen=True, eq=True)
class Message:
    """One application message.

    Args:
        body: the payload; ``str`` is encoded as UTF-8.
        message_id: the id that de-duplication keys on; generated (a UUID4 hex) when
            not given. Both copies of a replicated message carry the same id.
        partition_key: routes the message to a partition of a partitioned entity.
        properties: application properties (string keys, scalar values).
    """

    body: bytes
    message_id: str = ""
    partition_key: str | None = None
    properties: Mapping[str, PropertyValue] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            object.__setattr__(self, "body", self.body.encode("utf-8"))
        elif not isinstance(self.body, bytes):
            if isinstance(self.body, (bytearray, memoryview)):
                object.__setattr__(self, "body", bytes(self.body))
            else:
                raise TypeError(
                    f"Message body must be bytes or str, not {type(self.body).__name__}"
                )
        if not self.message_id:
            object.__setattr__(self, "message_id", uuid.uuid4().hex)
        elif not isinstance(self.message_id, str):
            raise TypeError("message_id must be a str")
        if self.properties is not _EMPTY:
            props = dict(self.properties)
            for key, value in props.items():
                if not isinstance(key, str):
                    raise TypeError(f"property names must be str, not {type(key).__name__}")
                if value is not None and not isinstance(value, (str, int, float, bool)):
                    raise TypeError(
                        f"property {key!r} must be str, int, float, bool or None, "
                        f"not {type(value).__name__}"
                    )
            object.__setattr__(self, "properties", MappingProxyType(props))

    def __hash__(self) -> int:
        return hash(self.message_id)

    def __reduce__(self) -> tuple[object, ...]:
        # The read-only properties view (a mappingproxy) cannot be pickled or
        # deep-copied; rebuild from a plain dict, which __post_init__ wraps again.
        return (
            type(self),
            (self.body, self.message_id, self.partition_key, dict(self.properties)),
        )

    @property
    def size(self) -> int:
        """Approximate size on the wire in bytes (body, id, key and properties)."""
        n = len(self.body) + len(self.message_id) + len(self.partition_key or "")
        for key, value in self.properties.items():
            n += len(key) + len(str(value))
        return n

    def __repr__(self) -> str:
        return (
            f"Message(message_id={self.message_id!r}, body=<{len(self.body)} bytes>, "
            f"partition_key={self.partition_key!r})"
        )
