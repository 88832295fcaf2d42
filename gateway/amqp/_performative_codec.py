"""Performatives and composites to and from the wire, for the geogateway emulator.

``to_described`` (and ``encode_performative_into``, which writes the same bytes
straight into a buffer) applies each field's AMQP type, and writes every field,
trailing nulls included, because azure-eventhub reads performative fields by
position. ``from_described`` takes a null or missing field as its default, and turns
nested composites (source, target, error, delivery states) into their classes;
described values it does not know (a transaction coordinator target, say) stay
``Described``. Symbol lists decode to tuples of ``Symbol``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeAlias

from gateway.amqp._composites import (
    Accepted,
    DeliveryState,
    Error,
    Modified,
    Received,
    Rejected,
    Released,
    Source,
    Target,
)
from gateway.amqp._decode import DecodeError, decode
from gateway.amqp._encode import (
    _BB,
    _BH,
    _PLACEHOLDER,
    _enc_array,
    _enc_binary,
    _enc_described,
    _enc_map,
    _enc_str,
    _enc_symbol,
    _enc_uint,
    _enc_ulong,
    _finish_compound,
)
from gateway.amqp._performatives import (
    AMQP_PERFORMATIVES,
    SASL_PERFORMATIVES,
    Performative,
)
from gateway.amqp._types import Array, Described, Symbol

__all__ = ["encode_performative_into", "from_described", "to_described"]

_Composite: TypeAlias = Performative | Error | Source | Target | DeliveryState
_NESTED: frozenset[type[Any]] = frozenset(
    (Error, Source, Target, Received, Accepted, Rejected, Released, Modified)
)
_CLASSES: tuple[type[_Composite], ...] = (*AMQP_PERFORMATIVES, *SASL_PERFORMATIVES, *_NESTED)


# --- writing ------------------------------------------------------------------------
# Fields are written straight into the output buffer, without building the typed
# values first: encode_frame is on the emulator's per-message path.

_Writer = Callable[[bytearray, Any], None]


def _unsigned(label: str, maximum: int, write: Callable[[bytearray, int], None]) -> _Writer:
    def check_and_write(buf: bytearray, v: Any) -> None:
        if not 0 <= v <= maximum:
            raise ValueError(f"{v!r} is out of range for {label}")
        write(buf, v)

    return check_and_write


def _write_bool(buf: bytearray, v: Any) -> None:
    if v is True:
        buf.append(0x41)
    elif v is False:
        buf.append(0x42)
    else:
        raise TypeError(f"expected a bool, got {v!r}")


def _write_string(buf: bytearray, v: Any) -> None:
    if not isinstance(v, str):
        raise TypeError(f"expected a str, got {v!r}")
    _enc_str(buf, v)


def _write_symbol(buf: bytearray, v: Any) -> None:
    if not isinstance(v, str):
        raise TypeError(f"expected a str, got {v!r}")
    _enc_symbol(buf, v)


def _write_binary(buf: bytearray, v: Any) -> None:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, got {v!r}")
    _enc_binary(buf, v if isinstance(v, bytes | bytearray) else v.tobytes())


def _write_symbols(buf: bytearray, v: Any) -> None:
    if isinstance(v, str):
        v = (v,)
    if isinstance(v, list | tuple):
        v = Array(tuple(x if type(x) is Symbol else Symbol(x) for x in v), "symbol")
    if not isinstance(v, Array):
        raise TypeError(f"expected a sequence of symbols, got {v!r}")
    _enc_array(buf, v)


def _write_fields(buf: bytearray, v: Any) -> None:
    if not isinstance(v, Mapping):
        raise TypeError(f"expected a mapping, got {v!r}")
    # str.__new__ skips Symbol's ASCII check, which encoding the symbol repeats anyway.
    _enc_map(buf, {str.__new__(Symbol, k) if type(k) is str else k: x for k, x in v.items()})


def _write_map(buf: bytearray, v: Any) -> None:
    if not isinstance(v, Mapping):
        raise TypeError(f"expected a mapping, got {v!r}")
    _enc_map(buf, {k: to_described(x) if type(x) in _BY_CLASS else x for k, x in v.items()})


def _write_composite(buf: bytearray, v: Any) -> None:
    if type(v) in _BY_CLASS:
        _write(buf, v)
    elif isinstance(v, Described):
        _enc_described(buf, v)
    else:
        raise TypeError(f"expected a composite or a Described, got {v!r}")


_WRITERS: dict[str, _Writer] = {
    "string": _write_string,
    "symbol": _write_symbol,
    "symbols": _write_symbols,
    "boolean": _write_bool,
    "ubyte": lambda buf, v: buf.extend(_BB.pack(0x50, v)),
    "ushort": lambda buf, v: buf.extend(_BH.pack(0x60, v)),
    "uint": _unsigned("uint", 0xFFFFFFFF, _enc_uint),
    "ulong": _unsigned("ulong", 0xFFFFFFFFFFFFFFFF, _enc_ulong),
    "binary": _write_binary,
    "fields": _write_fields,
    "map": _write_map,
    "composite": _write_composite,
}


def _write(buf: bytearray, obj: Any) -> None:
    spec = _BY_CLASS[type(obj)]
    buf += spec.prefix
    if not spec.writers:
        buf.append(0x45)
        return
    start = len(buf)
    buf += _PLACEHOLDER
    for name, write in spec.writers:
        value = getattr(obj, name)
        if value is None:
            buf.append(0x40)
        else:
            write(buf, value)
    _finish_compound(buf, start, len(spec.writers), 0xC0, 0xD0)


# --- reading ------------------------------------------------------------------------


def _from_symbols(v: object) -> tuple[str, ...]:
    items = (v,) if isinstance(v, str) else v.items if isinstance(v, Array) else None
    if items is not None and all(isinstance(x, str) and x.isascii() for x in items):
        return tuple(x if type(x) is Symbol else Symbol(x) for x in items)
    raise DecodeError(f"expected symbols, got {v!r}")


def _from_composite(v: object) -> object:
    if not isinstance(v, Described):
        raise DecodeError(f"expected a described value, got {v!r}")
    # Only composites nest; a described value with a performative's descriptor stays as is.
    return from_described(v) if _class_of(v.descriptor) in _NESTED else v


def _from_map(v: object) -> object:
    if not isinstance(v, dict):
        raise DecodeError(f"expected a map, got {v!r}")
    return {k: _from_composite(x) if isinstance(x, Described) else x for k, x in v.items()}


# What a field's wire value must be an instance of, or the function that converts it.
_READS: dict[str, type[Any] | Callable[[object], object]] = {
    "string": str,
    "symbol": str,
    "symbols": _from_symbols,
    "boolean": bool,
    "ubyte": int,
    "ushort": int,
    "uint": int,
    "ulong": int,
    "binary": bytes,
    "fields": dict,
    "map": _from_map,
    "composite": _from_composite,
}


@dataclass(frozen=True)
class _Field:
    name: str
    kind: type[Any]  # what the wire value must be an instance of, unless
    read: Callable[[object], object] | None  # a function converts it
    default: object  # or MISSING for a mandatory field


@dataclass(frozen=True)
class _Spec:
    prefix: bytes  # the described-type constructor and descriptor, as written
    writers: tuple[tuple[str, _Writer], ...]
    fields: tuple[_Field, ...]


def _spec(cls: type[Any]) -> _Spec:
    kinds = [(f, f.metadata["amqp"]) for f in fields(cls)]
    reads = [(f, _READS[kind]) for f, kind in kinds]
    return _Spec(
        bytes((0x00, 0x53, cls.DESCRIPTOR)),
        tuple((f.name, _WRITERS[kind]) for f, kind in kinds),
        tuple(
            _Field(f.name, read, None, f.default)
            if isinstance(read, type)
            else _Field(f.name, object, read, f.default)
            for f, read in reads
        ),
    )


_BY_CLASS: dict[type[Any], _Spec] = {cls: _spec(cls) for cls in _CLASSES}
_BY_DESCRIPTOR: dict[object, type[Any]] = {
    **{cls.DESCRIPTOR: cls for cls in _CLASSES},
    **{cls.NAME: cls for cls in _CLASSES},
}


def _class_of(descriptor: object) -> type[Any] | None:
    if isinstance(descriptor, bool) or not isinstance(descriptor, int | str):
        return None
    return _BY_DESCRIPTOR.get(descriptor)


def encode_performative_into(buf: bytearray, obj: object) -> None:
    """Append the encoding of a performative or composite, every field written.

    The bytes are those of ``encode(to_described(obj))``.

    Raises:
        TypeError: ``obj`` is not one of this module's classes, or a field has the
            wrong kind of value.
        ValueError: a field's value is out of range for its AMQP type.
    """
    if type(obj) not in _BY_CLASS:
        raise TypeError(f"not an AMQP performative or composite: {obj!r}")
    try:
        _write(buf, obj)
    except (struct.error, OverflowError) as exc:
        raise ValueError(f"cannot encode {obj!r}: {exc}") from exc


def to_described(obj: object) -> Described:
    """The described list of a performative or composite, every field written with its
    AMQP type (``UInt``, ``Symbol``, symbol ``Array``...), trailing nulls included.

    Raises:
        TypeError, ValueError: as ``encode_performative_into``.
    """
    buf = bytearray()
    encode_performative_into(buf, obj)
    value, _ = decode(buf)
    assert isinstance(value, Described)
    return value


def from_described(value: Described) -> Any:
    """Build the performative or composite a described list encodes.

    Missing trailing fields and nulls take the field's default; extra fields are
    ignored. Returns the dataclass instance (typed ``Any`` so callers can narrow it).

    Raises:
        DecodeError: unknown descriptor, not a list, a mandatory field missing, or a
            field of the wrong AMQP type.
    """
    if not isinstance(value, Described):
        raise DecodeError(f"expected a described value, got {value!r}")
    cls = _class_of(value.descriptor)
    if cls is None:
        raise DecodeError(f"unknown descriptor {value.descriptor!r}")
    items = value.value
    if not isinstance(items, list):
        raise DecodeError(f"{cls.NAME} is not a list: {items!r}")
    kwargs = {}
    count = len(items)
    for index, f in enumerate(_BY_CLASS[cls].fields):
        item = items[index] if index < count else None
        if item is None:
            if f.default is MISSING:
                raise DecodeError(f"{cls.NAME} lacks its mandatory field {f.name}")
        elif f.read is not None:
            kwargs[f.name] = f.read(item)
        elif isinstance(item, f.kind) and (f.kind is not int or type(item) is not bool):
            kwargs[f.name] = item
        else:
            raise DecodeError(f"{cls.NAME} field {f.name} has the wrong type: {item!r}")
    return cls(**kwargs)
