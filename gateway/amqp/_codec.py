"""The AMQP 1.0 type system of the geogateway emulator: typed values, encode and decode.

One import for the rest of the emulator, in three modules: ``_types`` (the typed
values: ``UInt``, ``Symbol``, ``Timestamp``, ``Described``, ``Array``, ...),
``_encode`` (Python and typed values to bytes) and ``_decode`` (bytes back to them,
safe on untrusted data).
"""

from __future__ import annotations

from gateway.amqp._decode import (
    MAX_DEPTH,
    Buffer,
    DecodeError,
    decode,
    decode_all,
    decode_described_value,
)
from gateway.amqp._encode import encode, encode_into
from gateway.amqp._types import (
    ARRAY_TYPES,
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
    "decode_described_value",
    "encode",
    "encode_into",
]
