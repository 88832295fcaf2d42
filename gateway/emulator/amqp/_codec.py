"""The AMQP 1.0 type system of the geogateway emulator: typed values, encode and decode.

Encoding maps plain Python values onto AMQP types: ``None`` → null, ``bool`` →
boolean, ``int`` → long, ``float`` → double, ``str`` → string, ``bytes`` /
``bytearray`` / ``memoryview`` → binary, ``uuid.UUID`` → uuid, ``dict`` → map,
``list`` / ``tuple`` → list. The wrappers below (``UInt``, ``Symbol``, ...) subclass
the builtins, so they compare equal to plain values, and are encoded as their own
AMQP type in its most compact form. ``Described`` and ``Array`` cover the rest.

Decoding returns the wrapper of the wire type for every integer, symbol, timestamp,
float and char, ``bytes`` for binary, ``str`` for string, ``list``, ``dict``,
``Described`` and ``Array``. Decimal values are not interpreted: they decode to
``Decimal32`` / ``Decimal64`` / ``Decimal128``, ``bytes`` subclasses holding the raw
IEEE 754 octets, and re-encode unchanged.

Empty arrays are written without an element constructor (``e0 01 00``), which is
what the Azure SDK's AMQP stack reads; both forms are accepted when decoding, and an
empty array without a constructor decodes as ``Array((), "null")``.

Decoding untrusted data raises only ``DecodeError``: nesting is capped at
``MAX_DEPTH`` and no size or count is trusted beyond the bytes actually present (an
array of zero-width elements, such as nulls, may hold no more elements than its
encoding has bytes).
Encoding raises ``TypeError`` for values without an AMQP type and ``ValueError`` for
values out of range.
"""

from __future__ import annotations

import operator
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, SupportsFloat, SupportsIndex, TypeAlias, TypeVar

__all__ = [
    "ARRAY_TYPES",
    "MAX_DEPTH",
    "Array",
    "Buffer",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "DecodeError",
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
    "decode",
    "decode_all",
    "encode",
    "encode_into",
]

#: Deepest nesting of lists, maps, arrays and described values that decode accepts.
MAX_DEPTH = 64

#: What decode accepts.
Buffer: TypeAlias = bytes | bytearray | memoryview


class DecodeError(ValueError):
    """Malformed AMQP data."""


# --- typed values -------------------------------------------------------------------

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


# --- encoding -----------------------------------------------------------------------

_f = struct.Struct(">f")
_BB = struct.Struct(">BB")
_Bb = struct.Struct(">Bb")
_BH = struct.Struct(">BH")
_Bh = struct.Struct(">Bh")
_BI = struct.Struct(">BI")
_Bi = struct.Struct(">Bi")
_BQ = struct.Struct(">BQ")
_Bq = struct.Struct(">Bq")
_Bf = struct.Struct(">Bf")
_Bd = struct.Struct(">Bd")
_BBB = struct.Struct(">BBB")
_BII = struct.Struct(">BII")
_II = struct.Struct(">II")
_PLACEHOLDER = bytes(9)

_Encoder = Callable[[bytearray, Any], None]


def _enc_null(buf: bytearray, v: None) -> None:
    buf.append(0x40)


def _enc_bool(buf: bytearray, v: bool) -> None:
    buf.append(0x41 if v else 0x42)


def _enc_long(buf: bytearray, v: int) -> None:
    buf += _Bb.pack(0x55, v) if -128 <= v <= 127 else _Bq.pack(0x81, v)


def _enc_int(buf: bytearray, v: int) -> None:
    buf += _Bb.pack(0x54, v) if -128 <= v <= 127 else _Bi.pack(0x71, v)


def _enc_uint(buf: bytearray, v: int) -> None:
    if v == 0:
        buf.append(0x43)
    else:
        buf += _BB.pack(0x52, v) if v <= 255 else _BI.pack(0x70, v)


def _enc_ulong(buf: bytearray, v: int) -> None:
    if v == 0:
        buf.append(0x44)
    else:
        buf += _BB.pack(0x53, v) if v <= 255 else _BQ.pack(0x80, v)


def _enc_binary(buf: bytearray, v: bytes | bytearray) -> None:
    n = len(v)
    buf += _BB.pack(0xA0, n) if n <= 255 else _BI.pack(0xB0, n)
    buf += v


def _enc_memoryview(buf: bytearray, v: memoryview) -> None:
    _enc_binary(buf, v.tobytes())


def _enc_str(buf: bytearray, v: str) -> None:
    raw = v.encode()
    n = len(raw)
    buf += _BB.pack(0xA1, n) if n <= 255 else _BI.pack(0xB1, n)
    buf += raw


def _enc_symbol(buf: bytearray, v: str) -> None:
    raw = v.encode("ascii")
    n = len(raw)
    buf += _BB.pack(0xA3, n) if n <= 255 else _BI.pack(0xB3, n)
    buf += raw


def _enc_uuid(buf: bytearray, v: uuid.UUID) -> None:
    buf.append(0x98)
    buf += v.bytes


def _finish_compound(buf: bytearray, start: int, count: int, code8: int, code32: int) -> None:
    # The compound was written after a 9-byte 32-bit header placeholder; shrink it if we can.
    body = len(buf) - start - 9
    if body < 255 and count <= 255:
        buf[start : start + 9] = _BBB.pack(code8, body + 1, count)
    else:
        _BII.pack_into(buf, start, code32, body + 4, count)


def _enc_list(buf: bytearray, v: list[Any] | tuple[Any, ...]) -> None:
    if not v:
        buf.append(0x45)
        return
    start = len(buf)
    buf += _PLACEHOLDER
    get = _ENCODERS.get
    for item in v:
        if item is None:
            buf.append(0x40)
        else:
            (get(type(item)) or _encoder_for(item))(buf, item)
    _finish_compound(buf, start, len(v), 0xC0, 0xD0)


def _enc_map(buf: bytearray, v: dict[Any, Any]) -> None:
    start = len(buf)
    buf += _PLACEHOLDER
    get = _ENCODERS.get
    for key, item in v.items():
        (get(type(key)) or _encoder_for(key))(buf, key)
        if item is None:
            buf.append(0x40)
        else:
            (get(type(item)) or _encoder_for(item))(buf, item)
    _finish_compound(buf, start, 2 * len(v), 0xC1, 0xD1)


def _enc_described(buf: bytearray, v: Described) -> None:
    buf.append(0x00)
    _encode(buf, v.descriptor)
    _encode(buf, v.value)


def _enc_array(buf: bytearray, v: Array) -> None:
    start = len(buf)
    buf += _PLACEHOLDER
    if v.items:
        _write_elements(buf, v.type, v.items)
    _finish_compound(buf, start, len(v.items), 0xE0, 0xF0)


def _fixed_codes(code: int, fmt: str) -> Callable[[bytearray, Iterable[Any]], None]:
    def write(buf: bytearray, items: Iterable[Any]) -> None:
        values = list(items)
        buf.append(code)
        buf += struct.pack(f">{len(values)}{fmt}", *values)

    return write


def _binary_bytes(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"a binary array holds bytes, not {value!r}")


def _str_of(value: object) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"a string or symbol array holds str, not {value!r}")


def _uuid_bytes(value: object) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    raise TypeError(f"a uuid array holds uuid.UUID, not {value!r}")


def _variable_codes(
    code8: int, code32: int, to_raw: Callable[[Any], bytes]
) -> Callable[[bytearray, Iterable[Any]], None]:
    def write(buf: bytearray, items: Iterable[Any]) -> None:
        raws = [to_raw(item) for item in items]
        small = max(map(len, raws)) <= 255
        buf.append(code8 if small else code32)
        size = struct.Struct(">B" if small else ">I")
        for raw in raws:
            buf += size.pack(len(raw))
            buf += raw

    return write


def _list_body(buf: bytearray, item: Any) -> int:
    for x in item:
        _encode(buf, x)
    return len(item)


def _map_body(buf: bytearray, item: Any) -> int:
    for key, value in item.items():
        _encode(buf, key)
        _encode(buf, value)
    return 2 * len(item)


def _array_body(buf: bytearray, item: Any) -> int:
    if not isinstance(item, Array):
        raise TypeError(f"an array of arrays holds Array items, not {item!r}")
    if item.items:
        _write_elements(buf, item.type, item.items)
    return len(item.items)


def _compound_codes(
    code: int, body: Callable[[bytearray, Any], int]
) -> Callable[[bytearray, Iterable[Any]], None]:
    # Array elements share one constructor, so lists, maps and arrays use their 32-bit forms.
    def write(buf: bytearray, items: Iterable[Any]) -> None:
        buf.append(code)
        for item in items:
            start = len(buf)
            buf += _PLACEHOLDER[:8]
            count = body(buf, item)
            _II.pack_into(buf, start, len(buf) - start - 4, count)

    return write


def _write_nulls(buf: bytearray, items: Iterable[Any]) -> None:
    if any(x is not None for x in items):
        raise TypeError("an array of nulls holds only None")
    buf.append(0x40)


def _write_described(buf: bytearray, items: Iterable[Any]) -> None:
    items = list(items)
    descriptor = items[0].descriptor
    if any(not isinstance(x, Described) or x.descriptor != descriptor for x in items):
        raise TypeError("a described array holds Described items with one descriptor")
    buf.append(0x00)
    _encode(buf, descriptor)
    values = [x.value for x in items]
    _write_elements(buf, _array_type_of(values[0]), values)


_ELEMENT_WRITERS: dict[str, Callable[[bytearray, Iterable[Any]], None]] = {
    "null": _write_nulls,
    "boolean": lambda buf, items: buf.extend(b"\x56" + bytes(1 if x else 0 for x in items)),
    "ubyte": _fixed_codes(0x50, "B"),
    "ushort": _fixed_codes(0x60, "H"),
    "uint": _fixed_codes(0x70, "I"),
    "ulong": _fixed_codes(0x80, "Q"),
    "byte": _fixed_codes(0x51, "b"),
    "short": _fixed_codes(0x61, "h"),
    "int": _fixed_codes(0x71, "i"),
    "long": _fixed_codes(0x81, "q"),
    "float": _fixed_codes(0x72, "f"),
    "double": _fixed_codes(0x82, "d"),
    "timestamp": _fixed_codes(0x83, "q"),
    "char": lambda buf, items: _fixed_codes(0x73, "I")(buf, map(ord, items)),
    "uuid": lambda buf, items: buf.extend(b"\x98" + b"".join(map(_uuid_bytes, items))),
    "decimal32": lambda buf, items: buf.extend(b"\x74" + b"".join(map(Decimal32, items))),
    "decimal64": lambda buf, items: buf.extend(b"\x84" + b"".join(map(Decimal64, items))),
    "decimal128": lambda buf, items: buf.extend(b"\x94" + b"".join(map(Decimal128, items))),
    "binary": _variable_codes(0xA0, 0xB0, _binary_bytes),
    "string": _variable_codes(0xA1, 0xB1, lambda x: _str_of(x).encode()),
    "symbol": _variable_codes(0xA3, 0xB3, lambda x: _str_of(x).encode("ascii")),
    "list": _compound_codes(0xD0, _list_body),
    "map": _compound_codes(0xD1, _map_body),
    "array": _compound_codes(0xF0, _array_body),
    "described": _write_described,
}


def _write_elements(buf: bytearray, kind: str, items: Iterable[Any]) -> None:
    _ELEMENT_WRITERS[kind](buf, items)


_ENCODERS: dict[type, _Encoder] = {
    type(None): _enc_null,
    bool: _enc_bool,
    int: _enc_long,
    Long: _enc_long,
    Int: _enc_int,
    UInt: _enc_uint,
    ULong: _enc_ulong,
    UByte: lambda buf, v: buf.extend(_BB.pack(0x50, v)),
    UShort: lambda buf, v: buf.extend(_BH.pack(0x60, v)),
    Byte: lambda buf, v: buf.extend(_Bb.pack(0x51, v)),
    Short: lambda buf, v: buf.extend(_Bh.pack(0x61, v)),
    Timestamp: lambda buf, v: buf.extend(_Bq.pack(0x83, v)),
    float: lambda buf, v: buf.extend(_Bd.pack(0x82, v)),
    Float: lambda buf, v: buf.extend(_Bf.pack(0x72, v)),
    str: _enc_str,
    Symbol: _enc_symbol,
    Char: lambda buf, v: buf.extend(_BI.pack(0x73, ord(v))),
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_memoryview,
    Decimal32: lambda buf, v: buf.extend(b"\x74" + v),
    Decimal64: lambda buf, v: buf.extend(b"\x84" + v),
    Decimal128: lambda buf, v: buf.extend(b"\x94" + v),
    uuid.UUID: _enc_uuid,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Described: _enc_described,
    Array: _enc_array,
}

_ARRAY_TYPE_BY_CLASS: dict[type, str] = {
    type(None): "null", bool: "boolean", int: "long", Long: "long", Int: "int",
    UInt: "uint", ULong: "ulong", UByte: "ubyte", UShort: "ushort", Byte: "byte",
    Short: "short", Timestamp: "timestamp", float: "double", Float: "float", str: "string",
    Symbol: "symbol", Char: "char", bytes: "binary", bytearray: "binary", memoryview: "binary",
    Decimal32: "decimal32", Decimal64: "decimal64", Decimal128: "decimal128",
    uuid.UUID: "uuid", list: "list", tuple: "list", dict: "map", Described: "described",
    Array: "array",
}  # fmt: skip


def _lookup(table: dict[type, Any], value: object) -> Any:
    # Subclasses (IntEnum, OrderedDict, ...) take the encoding of their nearest known base.
    for klass in type(value).__mro__:
        if klass in table:
            return table[klass]
    raise TypeError(f"no AMQP type for {type(value).__name__}: {value!r}")


def _encoder_for(value: object) -> _Encoder:
    encoder: _Encoder = _lookup(_ENCODERS, value)
    return encoder


def _array_type_of(value: object) -> str:
    kind: str = _lookup(_ARRAY_TYPE_BY_CLASS, value)
    return kind


def _encode(buf: bytearray, value: object) -> None:
    (_ENCODERS.get(type(value)) or _encoder_for(value))(buf, value)


def encode_into(buf: bytearray, value: object) -> None:
    """Append the AMQP encoding of ``value`` to ``buf``.

    Raises:
        TypeError: a value has no AMQP type.
        ValueError: a value is out of range for its type.
    """
    try:
        _encode(buf, value)
    except (struct.error, OverflowError) as exc:
        raise ValueError(f"cannot encode {value!r}: {exc}") from exc


def encode(value: object) -> bytes:
    """The AMQP encoding of ``value`` (see ``encode_into``)."""
    buf = bytearray()
    encode_into(buf, value)
    return bytes(buf)


# --- decoding -----------------------------------------------------------------------

_Reader = Callable[[Buffer, int, int], tuple[Any, int]]
_new_int = int.__new__
_U32 = struct.Struct(">I")


def _fixed(fmt: str, make: Callable[[Any], Any]) -> _Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)

    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        return make(unpack(d, p)[0]), p + size

    return read


def _integer(fmt: str, cls: type[int]) -> _Reader:
    # Hot path: one closure per wire type, no intermediate calls.
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)
    if fmt == ">B":
        return lambda d, p, depth: (_new_int(cls, d[p]), p + 1)
    return lambda d, p, depth: (_new_int(cls, unpack(d, p)[0]), p + size)


def _const(value: object) -> _Reader:
    return lambda d, p, depth: (value, p)


def _list0(d: Buffer, p: int, depth: int) -> tuple[list[Any], int]:
    return [], p


_BINARY, _STRING, _SYMBOL = range(3)


def _sized(wide: bool, kind: int) -> _Reader:
    unpack = _U32.unpack_from

    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        if wide:
            start = p + 4
            end = start + unpack(d, p)[0]
        else:
            start = p + 1
            end = start + d[p]
        if end > len(d):
            raise DecodeError("value runs past the end of the data")
        if kind == _STRING:
            return str(d[start:end], "utf-8"), end
        if kind == _SYMBOL:
            return str.__new__(Symbol, d[start:end], "ascii"), end
        return bytes(d[start:end]), end

    return read


def _raw(make: Callable[[bytes], Any], width: int) -> _Reader:
    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        if p + width > len(d):
            raise DecodeError("value runs past the end of the data")
        return make(bytes(d[p : p + width])), p + width

    return read


def _bool(d: Buffer, p: int, depth: int) -> tuple[bool, int]:
    octet = d[p]
    if octet > 1:
        raise DecodeError(f"boolean octet {octet:#x} is neither 0 nor 1")
    return octet == 1, p + 1


def _compound_header(d: Buffer, p: int, depth: int, wide: bool) -> tuple[int, int, int]:
    """(count, first item offset, end offset) of a list, map or array."""
    if depth >= MAX_DEPTH:
        raise DecodeError(f"AMQP values nested deeper than {MAX_DEPTH}")
    if wide:
        size, count = _II.unpack_from(d, p)
        start, end = p + 8, p + 4 + size
    else:
        size, count = d[p], d[p + 1]
        start, end = p + 2, p + 1 + size
    if end > len(d) or start > end:
        raise DecodeError("compound value runs past the end of the data")
    return count, start, end


def _items(d: Buffer, p: int, end: int, count: int, depth: int) -> list[Any]:
    if count > end - p:  # every item takes at least its constructor byte
        raise DecodeError(f"count {count} does not fit in {end - p} bytes")
    items = []
    readers = _READERS
    for _ in range(count):
        value, p = readers[d[p]](d, p + 1, depth)
        items.append(value)
    if p != end:
        raise DecodeError("compound size does not match its content")
    return items


def _list(wide: bool) -> _Reader:
    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        count, start, end = _compound_header(d, p, depth, wide)
        return _items(d, start, end, count, depth + 1), end

    return read


def _map(wide: bool) -> _Reader:
    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        count, start, end = _compound_header(d, p, depth, wide)
        if count % 2:
            raise DecodeError(f"map with an odd element count {count}")
        flat = _items(d, start, end, count, depth + 1)
        it = iter(flat)
        return dict(zip(it, it, strict=True)), end

    return read


def _array(wide: bool) -> _Reader:
    def read(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
        encoded_size = -p  # of the whole array, constructor included
        count, p, end = _compound_header(d, p, depth, wide)
        encoded_size += end + 1
        depth += 1
        if count == 0 and p == end:  # no element constructor, as the Azure SDK writes it
            return Array((), "null"), end
        code, p = d[p], p + 1
        descriptor: object = _NOT_DESCRIBED
        if code == 0x00:
            descriptor, p = _READERS[d[p]](d, p + 1, depth)
            code, p = d[p], p + 1
        kind = _ARRAY_TYPE_BY_CODE.get(code)
        if kind is None:
            raise DecodeError(f"invalid array element constructor {code:#x}")
        # Every element takes a byte, except zero-width ones (nulls, empty lists...): allow no
        # more of those than the array has bytes, so a few bytes cannot claim a huge array.
        if count > (encoded_size if code in _ZERO_WIDTH else end - p):
            raise DecodeError(f"array count {count} is larger than its content allows")
        reader, items = _READERS[code], []
        for _ in range(count):
            value, p = reader(d, p, depth)
            items.append(value)
        if p != end:
            raise DecodeError("array size does not match its content")
        if descriptor is not _NOT_DESCRIBED:
            return Array(tuple(Described(descriptor, x) for x in items), "described"), end
        return Array(tuple(items), kind), end

    return read


def _described(d: Buffer, p: int, depth: int) -> tuple[Described, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"AMQP values nested deeper than {MAX_DEPTH}")
    descriptor, p = _READERS[d[p]](d, p + 1, depth + 1)
    value, p = _READERS[d[p]](d, p + 1, depth + 1)
    return Described(descriptor, value), p


def _invalid(d: Buffer, p: int, depth: int) -> tuple[Any, int]:
    raise DecodeError(f"invalid AMQP constructor {d[p - 1]:#x}")


_NOT_DESCRIBED = object()
_ZERO_WIDTH = frozenset((0x40, 0x41, 0x42, 0x43, 0x44, 0x45))
_READERS: list[_Reader] = [_invalid] * 256
_READERS[0x00] = _described
_READERS[0x40] = _const(None)
_READERS[0x41] = _const(True)
_READERS[0x42] = _const(False)
_READERS[0x43] = _const(UInt(0))
_READERS[0x44] = _const(ULong(0))
_READERS[0x45] = _list0
_READERS[0x56] = _bool
for _code, _fmt, _cls in (
    (0x50, ">B", UByte), (0x51, ">b", Byte), (0x52, ">B", UInt), (0x53, ">B", ULong),
    (0x54, ">b", Int), (0x55, ">b", Long), (0x60, ">H", UShort), (0x61, ">h", Short),
    (0x70, ">I", UInt), (0x71, ">i", Int), (0x80, ">Q", ULong), (0x81, ">q", Long),
    (0x83, ">q", Timestamp),
):  # fmt: skip
    _READERS[_code] = _integer(_fmt, _cls)
_READERS[0x72] = _fixed(">f", lambda v: float.__new__(Float, v))
_READERS[0x82] = _fixed(">d", float)
_READERS[0x73] = _fixed(">I", lambda v: str.__new__(Char, chr(v)))
_READERS[0x74] = _raw(lambda b: bytes.__new__(Decimal32, b), 4)
_READERS[0x84] = _raw(lambda b: bytes.__new__(Decimal64, b), 8)
_READERS[0x94] = _raw(lambda b: bytes.__new__(Decimal128, b), 16)
_READERS[0x98] = _raw(lambda b: uuid.UUID(bytes=b), 16)
for _wide, _base in ((False, 0xA0), (True, 0xB0)):
    _READERS[_base] = _sized(_wide, _BINARY)
    _READERS[_base + 1] = _sized(_wide, _STRING)
    _READERS[_base + 3] = _sized(_wide, _SYMBOL)
for _wide, _base in ((False, 0xC0), (True, 0xD0)):
    _READERS[_base] = _list(_wide)
    _READERS[_base + 1] = _map(_wide)
    _READERS[_base + 0x20] = _array(_wide)

_ARRAY_TYPE_BY_CODE: dict[int, str] = {
    0x40: "null", 0x41: "boolean", 0x42: "boolean", 0x56: "boolean", 0x50: "ubyte",
    0x51: "byte", 0x60: "ushort", 0x61: "short", 0x43: "uint", 0x52: "uint", 0x70: "uint",
    0x44: "ulong", 0x53: "ulong", 0x80: "ulong", 0x54: "int", 0x71: "int", 0x55: "long",
    0x81: "long", 0x72: "float", 0x82: "double", 0x73: "char", 0x83: "timestamp",
    0x98: "uuid", 0x74: "decimal32", 0x84: "decimal64", 0x94: "decimal128",
    0xA0: "binary", 0xB0: "binary", 0xA1: "string", 0xB1: "string", 0xA3: "symbol",
    0xB3: "symbol", 0x45: "list", 0xC0: "list", 0xD0: "list", 0xC1: "map", 0xD1: "map",
    0xE0: "array", 0xF0: "array",
}  # fmt: skip

_FAILURES = (IndexError, KeyError, TypeError, ValueError, OverflowError, struct.error,
             RecursionError, MemoryError)  # fmt: skip


def _as_octets(data: Buffer) -> Buffer:
    if isinstance(data, memoryview) and data.format != "B":
        return data.cast("B")
    return data


def decode(data: Buffer, offset: int = 0) -> tuple[object, int]:
    """Decode one AMQP value.

    Args:
        data: the encoded bytes.
        offset: where the value's constructor starts.

    Returns:
        The value and the offset just past it.

    Raises:
        DecodeError: the data is malformed or truncated.
    """
    data = _as_octets(data)
    if not 0 <= offset < len(data):
        raise DecodeError(f"offset {offset} is outside {len(data)} bytes of data")
    try:
        return _READERS[data[offset]](data, offset + 1, 0)
    except DecodeError:
        raise
    except _FAILURES as exc:
        raise DecodeError(f"malformed AMQP data: {exc!r}") from exc


def decode_all(data: Buffer) -> list[object]:
    """Decode consecutive AMQP values until the end of ``data``.

    Raises:
        DecodeError: the data is malformed or truncated.
    """
    data = _as_octets(data)
    values, p, end, readers = [], 0, len(data), _READERS
    try:
        while p < end:
            value, p = readers[data[p]](data, p + 1, 0)
            values.append(value)
    except DecodeError:
        raise
    except _FAILURES as exc:
        raise DecodeError(f"malformed AMQP data: {exc!r}") from exc
    return values
