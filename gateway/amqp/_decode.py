"""The AMQP 1.0 decoder of the geogateway emulator: bytes to Python and typed values.

Decoding returns the wrapper of the wire type (``_types``) for every integer,
symbol, timestamp, float and char, ``bytes`` for binary, ``str`` for string,
``list``, ``dict``, ``Described`` and ``Array``. Decimal values are not interpreted:
they decode to ``Decimal32`` / ``Decimal64`` / ``Decimal128`` holding the raw
octets, and re-encode unchanged. An empty array without an element constructor (as
the Azure SDK writes it) decodes as ``Array((), "null")``.

Decoding untrusted data raises only ``DecodeError``: nesting is capped at
``MAX_DEPTH`` and no size or count is trusted beyond the bytes actually present (an
array of zero-width elements, such as nulls, may hold no more elements than its
encoding has bytes).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, TypeAlias

from gateway.amqp._types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Long,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = ["MAX_DEPTH", "Buffer", "DecodeError", "decode", "decode_all", "decode_described_value"]

#: Deepest nesting of lists, maps, arrays and described values that decode accepts.
MAX_DEPTH = 64

#: What decode accepts.
Buffer: TypeAlias = bytes | bytearray | memoryview


class DecodeError(ValueError):
    """Malformed AMQP data."""


_Reader = Callable[[Buffer, int, int], tuple[Any, int]]
_new_int = int.__new__
_U32 = struct.Struct(">I")
_II = struct.Struct(">II")


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
    return _decode_one(data, offset, 0)


def decode_described_value(data: Buffer, offset: int) -> tuple[object, int]:
    """Decode the value of a described value whose descriptor ends at ``offset``: what
    :func:`decode` of the whole puts in its ``Described``, one level of nesting down.

    A message's sections are described values with a one-byte descriptor (``0x00 0x53
    CODE``); reading their values directly spares building each descriptor and
    ``Described``, which is most of the work for a data section.

    Returns:
        The value and the offset just past it.

    Raises:
        DecodeError: the data is malformed or truncated.
    """
    return _decode_one(data, offset, 1)


def _decode_one(data: Buffer, offset: int, depth: int) -> tuple[object, int]:
    """One value whose constructor starts at ``offset``, ``depth`` levels of nesting down."""
    data = _as_octets(data)
    if not 0 <= offset < len(data):
        raise DecodeError(f"offset {offset} is outside {len(data)} bytes of data")
    try:
        return _READERS[data[offset]](data, offset + 1, depth)
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
