"""The AMQP 1.0 encoder of the geogateway emulator: Python and typed values to bytes.

Encoding maps plain Python values onto AMQP types: ``None`` → null, ``bool`` →
boolean, ``int`` → long, ``float`` → double, ``str`` → string, ``bytes`` /
``bytearray`` / ``memoryview`` → binary, ``uuid.UUID`` → uuid, ``dict`` → map,
``list`` / ``tuple`` → list; the typed values of ``_types`` are written as their own
AMQP type in its most compact form.

Empty arrays are written without an element constructor (``e0 01 00``), which is
what the Azure SDK's AMQP stack reads.

Encoding raises ``TypeError`` for values without an AMQP type and ``ValueError`` for
values out of range. The ``_enc_*`` writers of single values and the compound
helpers are shared with ``_performative_codec``, which writes fields straight into
the output buffer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from typing import Any

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

__all__ = ["encode", "encode_into"]

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
