"""The AMQP 1.0 typed values of the geogateway emulator: wrappers, described values, arrays.

Plain Python values stand for most AMQP types (see ``_encode``). The wrappers below
(``UInt``, ``Symbol``, ...) subclass the builtins, so they compare equal to plain
values, and are encoded as their own AMQP type in its most compact form.
``Described`` and ``Array`` cover the rest. Decimal values are not interpreted:
``Decimal32`` / ``Decimal64`` / ``Decimal128`` are ``bytes`` subclasses holding the
raw IEEE 754 octets.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, SupportsFloat, SupportsIndex, TypeVar

__all__ = [
    "ARRAY_TYPES",
    "Array",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Described",
    "Float",
    "Int",
    "Long",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
]

_I = TypeVar("_I", bound="_BoundedInt")


class _BoundedInt(int):
    __slots__ = ()
    MIN: ClassVar[int]
    MAX: ClassVar[int]

    def __new__(cls: type[_I], value: SupportsIndex = 0) -> _I:
        # operator.index refuses floats and strings, which int() would quietly convert.
        self = int.__new__(cls, operator.index(value))
        if not cls.MIN <= self <= cls.MAX:
            raise ValueError(f"{cls.__name__} out of range: {int(self)}")
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"


class UByte(_BoundedInt):
    """AMQP ubyte (0..255)."""

    MIN, MAX = 0, 0xFF


class UShort(_BoundedInt):
    """AMQP ushort (0..65535)."""

    MIN, MAX = 0, 0xFFFF


class UInt(_BoundedInt):
    """AMQP uint (0..2**32-1)."""

    MIN, MAX = 0, 0xFFFFFFFF


class ULong(_BoundedInt):
    """AMQP ulong (0..2**64-1)."""

    MIN, MAX = 0, 0xFFFFFFFFFFFFFFFF


class Byte(_BoundedInt):
    """AMQP byte (-128..127)."""

    MIN, MAX = -0x80, 0x7F


class Short(_BoundedInt):
    """AMQP short (16-bit signed)."""

    MIN, MAX = -0x8000, 0x7FFF


class Int(_BoundedInt):
    """AMQP int (32-bit signed)."""

    MIN, MAX = -0x80000000, 0x7FFFFFFF


class Long(_BoundedInt):
    """AMQP long (64-bit signed)."""

    MIN, MAX = -0x8000000000000000, 0x7FFFFFFFFFFFFFFF


class Timestamp(_BoundedInt):
    """AMQP timestamp: milliseconds since the Unix epoch (64-bit signed)."""

    MIN, MAX = Long.MIN, Long.MAX

    @classmethod
    def from_datetime(cls, value: datetime) -> Timestamp:
        """The timestamp of an aware datetime (naive ones are taken as UTC)."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return cls(delta // _ONE_MS)

    def to_datetime(self) -> datetime:
        """This timestamp as an aware UTC datetime."""
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + int(self) * _ONE_MS


_ONE_MS = timedelta(milliseconds=1)
_F = TypeVar("_F", bound="Float")
_f = struct.Struct(">f")


class Float(float):
    """AMQP float: a 32-bit IEEE 754 value, rounded to float32 on construction."""

    __slots__ = ()

    def __new__(cls: type[_F], value: SupportsFloat | SupportsIndex = 0.0) -> _F:
        try:
            packed = _f.pack(float(value))
        except OverflowError as exc:
            raise ValueError(f"Float out of range: {value!r}") from exc
        return float.__new__(cls, _f.unpack(packed)[0])

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"


class Symbol(str):
    """AMQP symbol: an ASCII string from a constrained domain."""

    __slots__ = ()

    def __new__(cls, value: str) -> Symbol:
        if not isinstance(value, str):
            raise TypeError(f"a Symbol is made from a str, not {value!r}")
        if not value.isascii():
            raise ValueError(f"a Symbol is ASCII, not {value!r}")
        return str.__new__(cls, value)

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


class Char(str):
    """AMQP char: a single Unicode code point."""

    __slots__ = ()

    def __new__(cls, value: str) -> Char:
        if not isinstance(value, str):
            raise TypeError(f"a Char is made from a str, not {value!r}")
        if len(value) != 1:
            raise ValueError(f"a Char is one character, not {value!r}")
        return str.__new__(cls, value)


class _RawDecimal(bytes):
    WIDTH: ClassVar[int]

    def __new__(cls, value: bytes) -> _RawDecimal:
        if not isinstance(value, bytes | bytearray):
            raise TypeError(f"{cls.__name__} holds bytes, not {value!r}")
        if len(value) != cls.WIDTH:
            raise ValueError(f"{cls.__name__} holds exactly {cls.WIDTH} bytes")
        return bytes.__new__(cls, value)


class Decimal32(_RawDecimal):
    """AMQP decimal32, kept as its 4 raw IEEE 754 octets."""

    WIDTH = 4


class Decimal64(_RawDecimal):
    """AMQP decimal64, kept as its 8 raw IEEE 754 octets."""

    WIDTH = 8


class Decimal128(_RawDecimal):
    """AMQP decimal128, kept as its 16 raw IEEE 754 octets."""

    WIDTH = 16


@dataclass(frozen=True)
class Described:
    """A described value; the descriptor is usually a ``ULong`` or a ``Symbol``."""

    descriptor: object
    value: object


#: The element types an ``Array`` can name.
ARRAY_TYPES = frozenset((
    "null", "boolean", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long",
    "float", "double", "char", "timestamp", "uuid", "binary", "string", "symbol", "list",
    "map", "array", "described", "decimal32", "decimal64", "decimal128",
))  # fmt: skip


@dataclass(frozen=True)
class Array:
    """An AMQP array: ``items`` all of the AMQP type named by ``type``.

    ``type`` is one of ``ARRAY_TYPES``. For ``"described"`` every item is a
    ``Described`` with the same descriptor, and the values share one type.
    """

    items: tuple[Any, ...]
    type: str

    def __post_init__(self) -> None:
        if self.type not in ARRAY_TYPES:
            raise ValueError(f"unknown array element type {self.type!r}")
        if not isinstance(self.items, tuple):
            object.__setattr__(self, "items", tuple(self.items))
