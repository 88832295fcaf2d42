"""The AMQP message format: sections, round trips, batches, interop with the Azure SDK's
message encoder and decoder, and hostile input."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from azure.eventhub._pyamqp import _decode as eh_decode
from azure.servicebus._pyamqp import _decode as sb_decode
from azure.servicebus._pyamqp import _encode as sdk_encode
from azure.servicebus._pyamqp import message as sdk_message
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp._codec import (
    Array,
    DecodeError,
    Described,
    Long,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    decode_all,
    encode,
)
from gateway.amqp._message import (
    BATCH_FORMAT,
    NO_VALUE,
    AmqpMessage,
    Header,
    Properties,
    body_bytes,
    decode_message,
    encode_message,
    split_batch,
)

U = uuid.UUID("12345678-1234-5678-1234-567812345678")

FULL = AmqpMessage(
    header=Header(durable=True, priority=7, ttl=60000, first_acquirer=True, delivery_count=2),
    delivery_annotations={Symbol("x-opt-lock-token"): U},
    message_annotations={
        Symbol("x-opt-sequence-number"): Long(42),
        Symbol("x-opt-enqueued-time"): Timestamp(1700000000000),
        Symbol("x-opt-partition-key"): "pk",
        ULong(7): "ulong key",
    },
    properties=Properties(
        message_id="m-1", user_id=b"user", to="orders", subject="subj", reply_to="replies",
        correlation_id=U, content_type="application/json", content_encoding="gzip",
        absolute_expiry_time=Timestamp(1700000060000), creation_time=Timestamp(1700000000000),
        group_id="session-1", group_sequence=5, reply_to_group_id="rg",
    ),
    application_properties={"key": "value", "n": 5, "flag": True, "when": Timestamp(1)},
    data=[b"hello ", b"world"],
    footer={Symbol("x-opt-crc"): b"\x00\x01"},
)  # fmt: skip


def test_a_full_message_round_trips():
    assert decode_message(encode_message(FULL)) == FULL


def test_sections_are_written_in_spec_order_with_every_header_and_property_field():
    sections = decode_all(encode_message(FULL))
    assert all(isinstance(s, Described) for s in sections)
    assert [s.descriptor for s in sections] == [  # type: ignore[attr-defined]
        0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x75, 0x78,
    ]  # fmt: skip
    header, properties = sections[0].value, sections[3].value  # type: ignore[attr-defined]
    assert header == [True, 7, 60000, True, 2] and len(properties) == 13
    assert [type(v) for v in header] == [bool, UByte, UInt, bool, UInt]
    assert type(properties[6]) is Symbol and type(properties[9]) is Timestamp
    assert type(properties[11]) is UInt


def test_an_empty_header_and_properties_are_written_in_full():
    message = AmqpMessage(header=Header(), properties=Properties(), value=None)
    sections = decode_all(encode_message(message))
    assert sections[0] == Described(ULong(0x70), [False, 4, None, False, 0])
    assert sections[1] == Described(ULong(0x73), [None] * 13)
    assert decode_message(encode_message(message)) == message


@pytest.mark.parametrize(
    ("message_id", "wire_type"),
    [("id", str), (ULong(5), ULong), (5, ULong), (U, uuid.UUID), (b"\x01", bytes)],
)
def test_message_ids_keep_their_type(message_id, wire_type):
    message = AmqpMessage(properties=Properties(message_id=message_id, correlation_id=message_id))
    decoded = decode_message(encode_message(message))
    assert decoded.properties is not None
    assert decoded.properties.message_id == message_id
    assert type(decoded.properties.message_id) is wire_type
    assert type(decoded.properties.correlation_id) is wire_type


def test_plain_ints_and_datetimes_become_timestamps():
    moment = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    message = AmqpMessage(properties=Properties(creation_time=moment, absolute_expiry_time=10))
    properties = decode_message(encode_message(message)).properties
    assert properties is not None
    assert properties.creation_time == Timestamp.from_datetime(moment)
    assert type(properties.absolute_expiry_time) is Timestamp


def test_non_ascii_annotation_keys_are_refused():
    with pytest.raises(ValueError):
        encode_message(AmqpMessage(message_annotations={"clé": 1}))


@pytest.mark.parametrize(
    "message",
    [AmqpMessage(application_properties={5: "x"}), AmqpMessage(data=["text"])],  # type: ignore[list-item]
    ids=["non-str property key", "str data section"],
)
def test_sections_of_the_wrong_type_are_refused(message):
    with pytest.raises(TypeError):
        encode_message(message)


def test_symbol_application_property_keys_are_written_as_strings():
    message = AmqpMessage(application_properties={Symbol("k"): 1})
    (section,) = decode_all(encode_message(message))
    assert [type(k) for k in section.value] == [str]  # type: ignore[attr-defined]


def test_plain_str_annotation_keys_are_written_as_symbols():
    message = AmqpMessage(message_annotations={"x-opt-a": 1, 3: "x"}, footer={"f": 1})
    sections = decode_all(encode_message(message))
    keys = list(sections[0].value)  # type: ignore[attr-defined]
    assert [type(k) for k in keys] == [Symbol, ULong]
    assert [type(k) for k in sections[1].value] == [Symbol]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "message",
    [
        AmqpMessage(value=None),
        AmqpMessage(value={"map": [1, 2]}),
        AmqpMessage(value="text"),
        AmqpMessage(sequence=[[1, "a"], [], [None]]),
        AmqpMessage(data=[b""]),
        AmqpMessage(),
    ],
    ids=["null value", "map value", "str value", "sequences", "empty data", "no sections"],
)
def test_every_body_kind_round_trips(message):
    assert decode_message(encode_message(message)) == message


def test_no_value_is_distinct_from_a_null_value():
    assert not AmqpMessage().has_value and AmqpMessage().value is NO_VALUE
    assert AmqpMessage(value=None).has_value
    assert encode_message(AmqpMessage()) == b""
    assert encode_message(AmqpMessage(value=None)) == bytes.fromhex("00537740")
    assert repr(NO_VALUE) == "NO_VALUE"


def test_sections_out_of_order_and_symbolic_descriptors_are_tolerated():
    payload = (
        encode(Described(Symbol("amqp:data:binary"), b"b"))
        + encode(Described(ULong(0x70), [True]))
        + encode(Described(Symbol("amqp:application-properties:map"), {"k": 1}))
    )
    message = decode_message(payload)
    assert message.data == [b"b"] and message.application_properties == {"k": 1}
    assert message.header == Header(durable=True)


def test_null_header_fields_take_their_defaults():
    payload = encode(Described(ULong(0x70), [None, None, None, None, None, "extra"]))
    assert decode_message(payload).header == Header()


MALFORMED = {
    "garbage": b"\xff\xfe",
    "not a section": encode("just a string"),
    "unknown descriptor": encode(Described(ULong(0x99), b"x")),
    "list descriptor": encode(Described([1], b"x")),
    "data is not binary": encode(Described(ULong(0x75), "text")),
    "header is not a list": encode(Described(ULong(0x70), {"a": 1})),
    "header field of the wrong type": encode(Described(ULong(0x70), ["yes"])),
    "header count is a bool": encode(Described(ULong(0x70), [None, None, None, None, True])),
    "properties is not a list": encode(Described(ULong(0x73), "p")),
    "annotations are not a map": encode(Described(ULong(0x72), [1])),
    "sequence is not a list": encode(Described(ULong(0x76), 1)),
    "truncated section": encode_message(FULL)[:-3],
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_payloads_raise_decode_error(payload):
    with pytest.raises(DecodeError):
        decode_message(payload)


# -- batches and bodies ----------------------------------------------------------------


def test_a_batch_splits_into_its_messages():
    # Given messages encoded one per data section of an outer message
    inner = [
        AmqpMessage(properties=Properties(message_id=f"m{i}"), data=[f"body {i}".encode()])
        for i in range(3)
    ]
    batch = AmqpMessage(
        message_annotations={"x-opt-partition-key": "pk"},
        data=[encode_message(m) for m in inner],
    )
    # When the outer message is decoded and split / Then the inner messages come back
    assert split_batch(decode_message(encode_message(batch))) == inner
    assert split_batch(AmqpMessage()) == []
    assert BATCH_FORMAT == 0x80013700


def test_a_batch_with_a_corrupt_message_raises_decode_error():
    with pytest.raises(DecodeError):
        split_batch(AmqpMessage(data=[b"\xff"]))


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (AmqpMessage(data=[b"ab", b"cd"]), b"abcd"),
        (AmqpMessage(value=b"raw"), b"raw"),
        (AmqpMessage(value="hé"), "hé".encode()),
        (AmqpMessage(), b""),
    ],
)
def test_body_bytes(message, expected):
    assert body_bytes(message) == expected


@pytest.mark.parametrize("message", [AmqpMessage(value=5), AmqpMessage(sequence=[[1]])])
def test_body_bytes_refuses_bodies_that_are_not_binary(message):
    with pytest.raises(TypeError):
        body_bytes(message)


# -- interop with the Azure SDK --------------------------------------------------------


def sdk_payload(message: sdk_message.Message) -> bytes:
    return bytes(sdk_encode.encode_payload(bytearray(), message))


SDK_FULL = sdk_message.Message(
    header=sdk_message.Header(durable=True, priority=5, ttl=1000, first_acquirer=False,
                              delivery_count=0),
    delivery_annotations={"x-opt-d": 1},
    message_annotations={"x-opt-partition-key": "pk", "x-opt-scheduled-enqueue-time": 5},
    properties=sdk_message.Properties(
        message_id="m-1", user_id=b"u", to="orders", subject="s", reply_to="r",
        correlation_id=U, content_type="text/plain", content_encoding="utf-8",  # type: ignore[arg-type]
        absolute_expiry_time=1700000060000, creation_time=1700000000000, group_id="g",
        group_sequence=3, reply_to_group_id="rg",
    ),
    application_properties={"key": "value", "n": 5},
    data=[b"payload"],
    footer={"x-opt-f": "f"},
)  # fmt: skip


def test_we_decode_what_the_sdk_encodes():
    message = decode_message(sdk_payload(SDK_FULL))
    assert message.header == Header(durable=True, priority=5, ttl=1000)
    assert message.delivery_annotations == {"x-opt-d": 1}
    assert message.message_annotations == {"x-opt-partition-key": "pk",
                                           "x-opt-scheduled-enqueue-time": 5}  # fmt: skip
    assert all(type(k) is Symbol for k in message.message_annotations)
    assert message.properties == Properties(
        message_id="m-1", user_id=b"u", to="orders", subject="s", reply_to="r",
        correlation_id=U, content_type="text/plain", content_encoding="utf-8",
        absolute_expiry_time=1700000060000, creation_time=1700000000000, group_id="g",
        group_sequence=3, reply_to_group_id="rg",
    )  # fmt: skip
    assert type(message.properties.creation_time) is Timestamp
    assert message.application_properties == {"key": "value", "n": 5}
    assert message.data == [b"payload"] and message.footer == {"x-opt-f": "f"}
    assert not message.has_value


def test_we_decode_an_sdk_value_body_and_batch():
    value_message = decode_message(sdk_payload(sdk_message.Message(value={"k": [1, 2]})))
    assert value_message.value == {"k": [1, 2]}
    inner = [sdk_message.Message(data=[b"one"]), sdk_message.Message(data=[b"two"],
             application_properties={"i": 2})]  # fmt: skip
    batch = sdk_message.BatchMessage(data=[sdk_payload(m) for m in inner])
    assert [body_bytes(m) for m in split_batch(decode_message(sdk_payload(batch)))] == [
        b"one", b"two",
    ]


@pytest.mark.parametrize("decoder", [sb_decode, eh_decode], ids=["servicebus", "eventhub"])
def test_the_sdk_decodes_what_we_encode(decoder):
    # Given our full message / When the SDK decodes it
    message = decoder.decode_payload(memoryview(encode_message(FULL)))
    # Then every section reads as we wrote it (the SDK returns strings as bytes)
    assert message.header == (True, 7, 60000, True, 2)
    assert message.delivery_annotations == {b"x-opt-lock-token": U}
    assert message.message_annotations[b"x-opt-sequence-number"] == 42
    assert message.message_annotations[7] == b"ulong key"
    assert message.properties == (
        b"m-1", b"user", b"orders", b"subj", b"replies", U, b"application/json", b"gzip",
        1700000060000, 1700000000000, b"session-1", 5, b"rg",
    )  # fmt: skip
    assert message.application_properties == {b"key": b"value", b"n": 5, b"flag": True,
                                              b"when": 1}  # fmt: skip
    assert message.data == [b"hello ", b"world"]
    assert message.footer == {b"x-opt-crc": b"\x00\x01"}


def test_the_sdk_decodes_our_value_and_sequence_bodies():
    def sdk_decoded(message: AmqpMessage) -> sdk_message.Message:
        return sb_decode.decode_payload(memoryview(encode_message(message)))

    assert sdk_decoded(AmqpMessage(value="v")).value == b"v"
    sequence = AmqpMessage(sequence=[[1, Array((Symbol("a"),), "symbol")]])
    assert sdk_decoded(sequence).sequence == [[1, [b"a"]]]


# -- hostile input ---------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_payloads_raise_only_decode_error(payload):
    try:
        split_batch(decode_message(payload))
    except DecodeError as exc:
        assert str(exc), "a DecodeError says what is wrong"


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 255), st.booleans())
def test_corrupted_messages_raise_only_decode_error(index, octet, insert):
    data = bytearray(encode_message(FULL))
    index %= len(data)
    if insert:
        data.insert(index, octet)
    else:
        data[index] = octet
    try:
        decode_message(bytes(data))
    except DecodeError as exc:
        assert str(exc), "a DecodeError says what is wrong"
