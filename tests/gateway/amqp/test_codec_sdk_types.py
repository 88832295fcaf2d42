"""Every AMQP type the Azure SDK's own AMQP stack writes survives the emulator's codec.

Values are drawn as the SDK's typed values (``{TYPE: ..., VALUE: ...}``) of every
primitive and composite type, encoded by the SDK (``_pyamqp._encode``), decoded and
encoded again by ``gateway.amqp``; the SDK's decoder (``_pyamqp._decode``) must read
the two encodings alike. That is what the emulator does with a message's bodies,
application properties and annotations that it does not copy as they came.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from azure.servicebus._pyamqp import _decode as sdk_decode
from azure.servicebus._pyamqp import _encode as sdk_encode
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.amqp._codec import Decimal128, decode, encode


def typed(kind: str) -> Any:
    return lambda value: {TYPE: kind, VALUE: value}


def ints(kind: str, low: int, high: int) -> st.SearchStrategy[Any]:
    return st.integers(low, high).map(typed(kind))


# The SDK's primitive types, each with the values it can write; arrays need one type.
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.just({TYPE: AMQPTypes.null, VALUE: None}),
    "boolean": st.booleans().map(typed(AMQPTypes.boolean)),
    "ubyte": ints(AMQPTypes.ubyte, 0, 2**8 - 1),
    "byte": ints(AMQPTypes.byte, -(2**7), 2**7 - 1),
    "ushort": ints(AMQPTypes.ushort, 0, 2**16 - 1),
    "short": ints(AMQPTypes.short, -(2**15), 2**15 - 1),
    "uint": ints(AMQPTypes.uint, 0, 2**32 - 1),
    "int": ints(AMQPTypes.int, -(2**31), 2**31 - 1),
    "ulong": ints(AMQPTypes.ulong, 0, 2**64 - 1),
    "long": ints(AMQPTypes.long, -(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, width=32).map(typed(AMQPTypes.float)),
    "double": st.floats(allow_nan=False).map(typed(AMQPTypes.double)),
    "timestamp": ints(AMQPTypes.timestamp, -(2**63), 2**63 - 1),
    "uuid": st.uuids().map(typed(AMQPTypes.uuid)),
    "binary": st.binary(max_size=300).map(typed(AMQPTypes.binary)),
    "string": st.text(max_size=300).map(typed(AMQPTypes.string)),
    "symbol": st.text(st.characters(max_codepoint=127), max_size=40).map(
        typed(AMQPTypes.symbol)),
}


def arrays() -> st.SearchStrategy[Any]:
    # An array's items share a type. Left out: null (the SDK's encoder writes no null
    # arrays) and boolean: the SDK writes a boolean array's items as 0x41/0x42 under the
    # 0x56 constructor, whose items the spec makes 0x00/0x01 (the codec refuses them,
    # and the SDK's own decoder reads them all as false).
    kinds = sorted(set(PRIMITIVES) - {"null", "boolean"})
    return st.sampled_from(kinds).flatmap(
        lambda kind: st.lists(PRIMITIVES[kind], min_size=1, max_size=5).map(
            typed(AMQPTypes.array)))


def sdk_values() -> st.SearchStrategy[Any]:
    keys = st.one_of(st.text(max_size=10), st.integers(-(2**31), 2**31 - 1))
    return st.recursive(
        st.one_of(*PRIMITIVES.values(), arrays()),
        lambda children: st.one_of(
            st.lists(children, max_size=5).map(typed(AMQPTypes.list)),
            st.dictionaries(keys, children, max_size=5).map(typed(AMQPTypes.map)),
            st.tuples(PRIMITIVES["ulong"] | PRIMITIVES["symbol"], children).map(
                typed(AMQPTypes.described)),
        ),
        max_leaves=15,
    )


def sdk_encoded(value: Any) -> bytes:
    buf = bytearray()
    sdk_encode.encode_value(buf, value)
    return bytes(buf)


def _sdk_reads(data: bytes) -> bool:
    try:
        sdk_decoded(data)
    except Exception:  # whatever its decoder raises, it cannot read it
        return False
    return True


def sdk_decoded(data: bytes) -> object:
    rest, value = sdk_decode._DECODE_BY_CONSTRUCTOR[data[0]](memoryview(data)[1:])
    assert len(rest) == 0
    return value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sdk_values())
def test_the_sdk_reads_our_encoding_of_any_value_it_wrote_as_its_own(value: Any) -> None:
    # Given a value of any type, as the SDK encodes it (and can read back itself: it
    # writes an array holding uint or ulong 0 with a constructor per element, which is
    # no AMQP array, and its own decoder cannot read it)
    theirs = sdk_encoded(value)
    assume(_sdk_reads(theirs))
    # When the emulator's codec decodes it and encodes it again
    ours, end = decode(theirs)
    assert end == len(theirs)
    again = encode(ours)
    # Then the SDK reads both alike, and the codec reads its own encoding back
    assert sdk_decoded(again) == sdk_decoded(theirs)
    assert decode(again)[0] == ours


@given(st.decimals(allow_nan=False, allow_infinity=False, places=4,
                   min_value=Decimal("-1e20"), max_value=Decimal("1e20")))
def test_a_decimal128_keeps_the_octets_the_sdk_wrote(value: Decimal) -> None:
    # Given a decimal128 as the SDK encodes it (its own decoder cannot read every one of
    # its encodings back, so octets are compared, not values)
    theirs = sdk_encoded(value)
    # When the codec decodes it and encodes it again
    ours, _ = decode(theirs)
    # Then it holds the 16 octets and writes them back unchanged
    assert type(ours) is Decimal128 and bytes(ours) == theirs[1:]
    assert encode(ours) == theirs


def test_the_sdk_reads_a_timestamp_and_a_described_value_as_it_wrote_them() -> None:
    # Given a datetime and a described value, as the SDK writes them from Python values
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, datetime.timezone.utc)
    for value in (when, ("descriptor", [1, 2])):
        theirs = sdk_encoded(value)
        # Then the codec's encoding of what it decoded reads the same to the SDK
        assert sdk_decoded(encode(decode(theirs)[0])) == sdk_decoded(theirs)
