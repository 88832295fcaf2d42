"""The emulator's AMQP type system: encodings, round trips, interop with the Azure SDK's
AMQP stack, and hostile input."""

from __future__ import annotations

import ast
import math
import struct
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from azure.servicebus._pyamqp import _decode as sdk_decode
from azure.servicebus._pyamqp import _encode as sdk_encode
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gateway.amqp
from gateway.amqp._codec import (
    MAX_DEPTH,
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    DecodeError,
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
    decode,
    decode_all,
    encode,
    encode_into,
)

U = uuid.UUID("12345678-1234-5678-1234-567812345678")


def round_trip(value: object) -> object:
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data)
    return decoded


# -- primitives and wrappers -----------------------------------------------------------

ENCODINGS = [
    (None, "40"),
    (True, "41"),
    (False, "42"),
    (0, "5500"),
    (-1, "55ff"),
    (127, "557f"),
    (128, "810000000000000080"),
    (-129, "81ffffffffffffff7f"),
    (UInt(0), "43"),
    (UInt(255), "52ff"),
    (UInt(256), "7000000100"),
    (UInt(2**32 - 1), "70ffffffff"),
    (ULong(0), "44"),
    (ULong(255), "53ff"),
    (ULong(256), "800000000000000100"),
    (Int(-128), "5480"),
    (Int(128), "7100000080"),
    (Long(5), "5505"),
    (UByte(255), "50ff"),
    (Byte(-1), "51ff"),
    (UShort(256), "600100"),
    (Short(-2), "61fffe"),
    (1.5, "823ff8000000000000"),
    (Float(1.5), "723fc00000"),
    (Timestamp(1), "830000000000000001"),
    (Char("A"), "7300000041"),
    ("", "a100"),
    ("é", "a102c3a9"),
    (Symbol("ab"), "a3026162"),
    (b"", "a000"),
    (b"\x01", "a00101"),
    (U, "98" + U.hex),
    ([], "45"),
    ([None], "c0020140"),
    ({}, "c10100"),
    ({Symbol("k"): 1}, "c10602a3016b5501"),
    (Described(ULong(0x24), []), "00532445"),
    (Array((Symbol("a"),), "symbol"), "e00401a30161"),
    (Array((1, 2), "uint"), "e00a02700000000100000002"),
]


@pytest.mark.parametrize(("value", "expected"), ENCODINGS, ids=[e for _, e in ENCODINGS])
def test_each_value_has_its_compact_encoding_and_round_trips(value, expected):
    # Given a value / When it is encoded / Then the bytes are the spec's compact form
    assert encode(value).hex() == expected
    # And decoding gives back an equal value of the same wire type
    decoded = round_trip(value)
    assert decoded == value
    if isinstance(value, bool | str | bytes | float) or value is None:
        assert type(decoded) is type(value)


@pytest.mark.parametrize(
    ("value", "wire_type"),
    [(0, Long), (1 << 40, Long), (UInt(7), UInt), (ULong(7), ULong), (Int(7), Int),
     (UByte(7), UByte), (Short(7), Short), (Timestamp(7), Timestamp), (Symbol("s"), Symbol),
     (Float(0.5), Float), (Char("x"), Char)],
)  # fmt: skip
def test_decoded_values_remember_their_wire_type(value, wire_type):
    assert type(round_trip(value)) is wire_type


@pytest.mark.parametrize("size", [255, 256, 300, 70000])
def test_long_strings_symbols_and_binary_use_the_32_bit_forms(size):
    # Given values longer than 255 octets / Then they use str32, sym32 and vbin32
    for value, small, large in [("s" * size, 0xA1, 0xB1), (Symbol("y" * size), 0xA3, 0xB3),
                                (b"b" * size, 0xA0, 0xB0)]:  # fmt: skip
        assert encode(value)[0] == (small if size <= 255 else large)
        assert round_trip(value) == value


@pytest.mark.parametrize(
    "value",
    [list(range(300)), [b"x" * 300], {str(i): i for i in range(200)}, {"k": "v" * 300},
     Array(tuple(range(100)), "long"), Array(("x" * 300,), "string")],
)  # fmt: skip
def test_large_compounds_use_the_32_bit_forms(value):
    data = encode(value)
    assert data[0] in (0xD0, 0xD1, 0xF0)
    assert round_trip(value) == value


def test_nested_compounds_round_trip():
    value = {
        Symbol("list"): [1, [UInt(2), [ULong(3), {"deep": [None, True]}]], "s"],
        "map": {ULong(1): {Symbol("x"): Array((Symbol("a"), Symbol("b")), "symbol")}},
        Long(3): Described(Symbol("com.example:thing"), {"inner": [b"\x00" * 300]}),
        "uuid": U,
        "arrays": Array((Array((1, 2), "int"), Array((), "null")), "array"),
    }
    assert round_trip(value) == value


ARRAYS = [
    Array((True, False, True), "boolean"),
    Array((UByte(0), UByte(255)), "ubyte"),
    Array((0, 65535), "ushort"),
    Array((0, 2**32 - 1), "uint"),
    Array((0, 2**64 - 1), "ulong"),
    Array((-128, 127), "byte"),
    Array((-(2**15), 2**15 - 1), "short"),
    Array((-(2**31), 2**31 - 1), "int"),
    Array((-(2**63), 2**63 - 1), "long"),
    Array((Float(1.5), Float(-2.0)), "float"),
    Array((1.25, -0.0), "double"),
    Array((Char("a"), Char("€")), "char"),
    Array((Timestamp(0), Timestamp(1700000000000)), "timestamp"),
    Array((U, uuid.UUID(int=0)), "uuid"),
    Array((b"", b"\xff" * 10), "binary"),
    Array(("", "hé"), "string"),
    Array((Symbol("a"), Symbol("b" * 300)), "symbol"),
    Array(([1, "x"], []), "list"),
    Array(({"a": 1}, {}), "map"),
    Array((None, None), "null"),
    Array((Decimal32(b"1234"), Decimal32(bytes(4))), "decimal32"),
    Array((Decimal64(bytes(8)),), "decimal64"),
    Array((Decimal128(bytes(range(16))),), "decimal128"),
    Array((Described(ULong(9), [1]), Described(ULong(9), [2])), "described"),
]


@pytest.mark.parametrize("array", ARRAYS, ids=[a.type for a in ARRAYS])
def test_arrays_of_every_type_round_trip(array):
    # Given an array / When round tripped / Then type and items survive
    decoded = round_trip(array)
    assert isinstance(decoded, Array)
    assert decoded.type == array.type
    assert decoded.items == array.items


def test_a_short_array_of_zero_width_elements_decodes():
    # Given arrays whose elements take no bytes at all, as few as their encoding is long
    assert decode(bytes.fromhex("e0020440")) == (Array((None,) * 4, "null"), 4)
    assert decode(bytes.fromhex("e0020341")) == (Array((True,) * 3, "boolean"), 4)


def test_an_empty_array_is_written_without_element_constructor():
    # As the Azure SDK reads and writes it; the element type is then unknown
    assert encode(Array((), "symbol")) == bytes.fromhex("e00100")
    assert round_trip(Array((), "symbol")) == Array((), "null")


def test_an_array_with_its_element_constructor_but_no_items_decodes():
    # Other AMQP stacks write the element constructor even for an empty array
    assert decode(bytes.fromhex("e00200a3")) == (Array((), "symbol"), 4)
    assert decode(bytes.fromhex("f000000005000000 00a3".replace(" ", ""))) == (
        Array((), "symbol"),
        10,
    )


def test_decimals_are_kept_as_raw_octets():
    for value in (Decimal32(b"\x01\x02\x03\x04"), Decimal64(bytes(8)), Decimal128(bytes(16))):
        decoded = round_trip(value)
        assert type(decoded) is type(value) and decoded == value
    with pytest.raises(ValueError):
        Decimal32(b"123")


@pytest.mark.parametrize(
    ("cls", "bad"),
    [(UByte, 256), (UByte, -1), (UShort, 65536), (UInt, 2**32), (UInt, -1), (ULong, 2**64),
     (Byte, 128), (Short, -(2**15) - 1), (Int, 2**31), (Long, 2**63), (Timestamp, -(2**63) - 1)],
)  # fmt: skip
def test_wrappers_refuse_values_out_of_range(cls, bad):
    with pytest.raises(ValueError):
        cls(bad)


@pytest.mark.parametrize("bad", [1.5, "5", None])
def test_integer_wrappers_refuse_what_is_not_an_integer(bad):
    with pytest.raises(TypeError):
        UInt(bad)


def test_other_wrappers_validate_on_construction():
    with pytest.raises(ValueError):
        Symbol("é")
    with pytest.raises(ValueError):
        Char("ab")
    with pytest.raises(ValueError):
        Float(1e39)
    with pytest.raises(ValueError):
        Array((), "nope")


def test_wrappers_compare_and_hash_like_plain_values():
    assert UInt(5) == 5 and hash(UInt(5)) == hash(5)
    assert Symbol("a") == "a" and {"a": 1}[Symbol("a")] == 1
    assert Float(0.5) == 0.5 and Float(0.1) == struct.unpack(">f", struct.pack(">f", 0.1))[0]
    assert repr(UInt(5)) == "UInt(5)" and repr(Symbol("a")) == "Symbol('a')"
    assert Array([1, 2], "int").items == (1, 2)  # type: ignore[arg-type]


def test_timestamps_convert_to_and_from_datetimes():
    moment = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    stamp = Timestamp.from_datetime(moment)
    assert stamp == 1714979289123
    assert stamp.to_datetime() == moment
    assert Timestamp.from_datetime(moment.replace(tzinfo=None)) == stamp


def test_subclasses_of_builtins_encode_as_their_base():
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    assert encode(Colour.RED) == encode(1)
    with pytest.raises(TypeError):
        encode(object())
    with pytest.raises(TypeError):
        encode({1, 2})


def test_encoding_out_of_range_plain_values_raises_value_error():
    with pytest.raises(ValueError):
        encode(2**63)
    with pytest.raises(ValueError):
        encode(Array((2**32,), "uint"))
    with pytest.raises(ValueError):
        encode(Array((1e39,), "float"))
    with pytest.raises(ValueError):
        encode(Array(("é",), "symbol"))


@pytest.mark.parametrize("kind", ["binary", "string", "symbol", "uuid", "decimal32", "null"])
def test_array_items_of_the_wrong_type_raise_type_error(kind):
    with pytest.raises(TypeError):
        encode(Array((4,), kind))
    with pytest.raises(TypeError):
        encode(Array((Described(1, 2), Described(2, 2)), "described"))


def test_encode_into_appends_and_memoryview_is_binary():
    buf = bytearray(b"\xff")
    encode_into(buf, memoryview(b"abc"))
    assert bytes(buf) == b"\xff\xa0\x03abc"
    assert decode(memoryview(buf), 1) == (b"abc", 6)


def test_float_special_values_round_trip():
    assert math.isnan(round_trip(float("nan")))  # type: ignore[arg-type]
    assert round_trip(float("-inf")) == float("-inf")
    assert round_trip(Float(float("inf"))) == float("inf")


def test_decode_all_reads_consecutive_values():
    data = encode(1) + encode("two") + encode([3])
    assert decode_all(data) == [1, "two", [3]]
    assert decode_all(b"") == []


# -- malformed input -------------------------------------------------------------------

MALFORMED = {
    "unknown constructor": b"\x01",
    "truncated uint": b"\x70\x00\x00",
    "truncated string": b"\xa1\x05ab",
    "truncated str32": b"\xb1\xff\xff\xff\xffab",
    "invalid utf-8": b"\xa1\x02\xc3\x28",
    "non-ascii symbol": b"\xa3\x01\xe9",
    "boolean octet 2": b"\x56\x02",
    "map with odd count": bytes.fromhex("c1030140 40"[:8]),
    "unhashable key": bytes.fromhex("c1050245 5501".replace(" ", "")),
    "list size too large": bytes.fromhex("c0ff0140"),
    "list count beyond size": bytes.fromhex("c00205 40".replace(" ", "")),
    "list size past content": bytes.fromhex("c003014040"),
    "huge list32 count": bytes.fromhex("d000000005ffffffff40"),
    "huge list32 size": bytes.fromhex("d0ffffff00000000014040"),
    "huge array of nulls": bytes.fromhex("f000000005ffffffff40"),
    "array of nulls larger than its bytes": bytes.fromhex("e0020b40"),
    "array of empty lists larger than its bytes": bytes.fromhex("f0000000050001000045"),
    "huge array count": bytes.fromhex("f000000006ffffffff5000"),
    "array bad element constructor": bytes.fromhex("e0030101ff"),
    "array short content": bytes.fromhex("e004027000"),
    "char beyond unicode": bytes.fromhex("7300110000"),
    "described without value": b"\x00\x53\x10",
    "decimal128 truncated": b"\x94" + bytes(15),
    "uuid truncated": b"\x98" + bytes(15),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_input_raises_decode_error(data):
    with pytest.raises(DecodeError):
        decode(data)
    with pytest.raises(DecodeError):
        decode_all(data)


def test_decode_refuses_offsets_outside_the_data():
    with pytest.raises(DecodeError):
        decode(b"")
    with pytest.raises(DecodeError):
        decode(b"\x40", 1)
    with pytest.raises(DecodeError):
        decode(b"\x40", -1)


@pytest.mark.parametrize("wrap", ["list", "described", "array"])
def test_nesting_deeper_than_the_cap_is_refused(wrap):
    # Given values nested just within and just beyond the cap
    def nested(depth: int) -> bytes:
        data = b"\x40"
        if wrap == "array":  # the innermost array holds one null
            data, depth = b"\xf0" + struct.pack(">II", 5, 1) + b"\x40", depth - 1
        for _ in range(depth):
            if wrap == "list":
                data = b"\xd0" + struct.pack(">II", len(data) + 4, 1) + data
            elif wrap == "described":
                data = b"\x00\x40" + data
            else:
                data = b"\xf0" + struct.pack(">II", len(data) + 4, 1) + b"\xf0" + data[1:]
        return data

    # Then the cap is honoured without a RecursionError
    decode(nested(MAX_DEPTH))
    with pytest.raises(DecodeError):
        decode(nested(MAX_DEPTH + 1))
    with pytest.raises(DecodeError):
        decode(nested(10_000))


# -- interop with the Azure SDK's AMQP stack --------------------------------------------


def sdk_decoded(data: bytes) -> object:
    rest, value = sdk_decode._DECODE_BY_CONSTRUCTOR[data[0]](memoryview(data)[1:])
    assert len(rest) == 0
    return value


def test_the_sdk_decodes_what_we_encode():
    value = {
        Symbol("x-opt-sequence-number"): Long(5),
        Symbol("x-opt-enqueued-time"): Timestamp(1700000000000),
        "string": "hé" * 200,
        "uint": UInt(300),
        "list": [1, True, None, b"bin", U],
        "symbols": Array((Symbol("a"), Symbol("b")), "symbol"),
        "empty": Array((), "symbol"),
        "after": "still aligned",
    }
    decoded = sdk_decoded(encode(value))
    # The SDK returns strings and symbols as bytes.
    assert decoded == {
        b"x-opt-sequence-number": 5,
        b"x-opt-enqueued-time": 1700000000000,
        b"string": ("hé" * 200).encode(),
        b"uint": 300,
        b"list": [1, True, None, b"bin", U],
        b"symbols": [b"a", b"b"],
        b"empty": [],
        b"after": b"still aligned",
    }


@pytest.mark.parametrize(
    ("amqp_type", "value", "expected"),
    [(AMQPTypes.uint, 5, UInt(5)), (AMQPTypes.ulong, 2**40, ULong(2**40)),
     (AMQPTypes.ushort, 7, UShort(7)), (AMQPTypes.ubyte, 7, UByte(7)),
     (AMQPTypes.int, -5, Int(-5)), (AMQPTypes.long, -(2**40), Long(-(2**40))),
     (AMQPTypes.symbol, "sym", Symbol("sym")), (AMQPTypes.string, "s" * 300, "s" * 300),
     (AMQPTypes.binary, b"b", b"b"), (AMQPTypes.timestamp, 1700000000000, Timestamp(1700000000000)),
     (AMQPTypes.boolean, True, True), (AMQPTypes.uuid, U, U), (AMQPTypes.double, 2.5, 2.5),
     (AMQPTypes.float, 2.5, Float(2.5)), (AMQPTypes.null, None, None)],
)  # fmt: skip
def test_we_decode_what_the_sdk_encodes(amqp_type, value, expected):
    buf = bytearray()
    sdk_encode.encode_value(buf, {TYPE: amqp_type, VALUE: value})
    decoded = round_trip_bytes(bytes(buf))
    assert decoded == expected and type(decoded) is type(expected)


def round_trip_bytes(data: bytes) -> object:
    value, end = decode(data)
    assert end == len(data)
    return value


def test_we_decode_sdk_compounds():
    buf = bytearray()
    sdk_encode.encode_value(buf, {"k": [1, "x", {"n": None}], "big": list(range(300))})
    sdk_encode.encode_value(buf, {TYPE: AMQPTypes.array, VALUE: [
        {TYPE: AMQPTypes.symbol, VALUE: "a"}, {TYPE: AMQPTypes.symbol, VALUE: "b"}]})  # fmt: skip
    sdk_encode.encode_value(buf, {TYPE: AMQPTypes.array, VALUE: []})
    assert decode_all(bytes(buf)) == [
        {"k": [1, "x", {"n": None}], "big": list(range(300))},
        Array((Symbol("a"), Symbol("b")), "symbol"),
        Array((), "null"),
    ]


# -- properties ------------------------------------------------------------------------


def amqp_values() -> st.SearchStrategy[object]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(0, 2**32 - 1).map(UInt),
        st.integers(0, 2**64 - 1).map(ULong),
        st.integers(-(2**31), 2**31 - 1).map(Int),
        st.integers(0, 255).map(UByte),
        st.floats(allow_nan=False),
        st.text(max_size=300),
        st.text(st.characters(max_codepoint=127), max_size=20).map(Symbol),
        st.binary(max_size=300),
        st.uuids(),
        st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(st.text(max_size=10), children, max_size=5),
            st.builds(Described, st.integers(0, 2**64 - 1).map(ULong), children),
            st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=5).map(
                lambda xs: Array(tuple(xs), "uint")
            ),
        ),
        max_leaves=20,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(amqp_values())
def test_any_value_round_trips(value):
    assert round_trip(value) == value


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_nothing_but_decode_error(data):
    try:
        decode_all(data)
    except DecodeError as exc:
        assert str(exc), "a DecodeError says what is wrong"


@settings(max_examples=300, deadline=None)
@given(amqp_values(), st.data())
def test_corrupted_encodings_raise_nothing_but_decode_error(value, data):
    raw = bytearray(encode(value))
    index = data.draw(st.integers(0, len(raw) - 1))
    action = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
    octet = data.draw(st.integers(0, 255))
    if action == "flip":
        raw[index] = octet
    elif action == "insert":
        raw.insert(index, octet)
    elif action == "delete":
        del raw[index]
    else:
        del raw[index:]
    try:
        decode_all(bytes(raw))
    except DecodeError as exc:
        assert str(exc), "a DecodeError says what is wrong"


@pytest.mark.parametrize("module", ["_types", "_encode", "_decode", "_codec", "_composites",
                                    "_performatives", "_performative_codec", "_frames",
                                    "_message"])
def test_the_wire_modules_import_no_azure_module(module):
    # Given the source of a wire module / Then it imports only the standard library and
    # its sibling modules of the AMQP package
    tree = ast.parse((Path(gateway.amqp.__file__).parent / f"{module}.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
        and not (node.module or "").startswith("gateway.amqp.")
    }  # fmt: skip
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
