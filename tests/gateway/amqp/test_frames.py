"""Frames and performatives: round trips, incremental reading, interop with the Azure
SDKs' AMQP stacks (both the Service Bus and the Event Hubs copy), and hostile input."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from azure.eventhub._pyamqp import _decode as eh_decode
from azure.servicebus._pyamqp import _decode as sb_decode
from azure.servicebus._pyamqp import _encode as sdk_encode
from azure.servicebus._pyamqp import endpoints as sdk_endpoints
from azure.servicebus._pyamqp import error as sdk_error
from azure.servicebus._pyamqp import outcomes as sdk_outcomes
from azure.servicebus._pyamqp import performatives as sdk
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp._codec import (
    Array,
    DecodeError,
    Described,
    Symbol,
    UByte,
    UInt,
    ULong,
    UShort,
    encode,
)
from gateway.amqp._composites import (
    Accepted,
    Error,
    Modified,
    Received,
    Rejected,
    Released,
    Source,
    Target,
)
from gateway.amqp._frames import (
    AMQP_HEADER,
    DECODE_ERROR,
    FRAME_AMQP,
    FRAME_SASL,
    FRAMING_ERROR,
    MIN_MAX_FRAME_SIZE,
    SASL_HEADER,
    Frame,
    FrameError,
    FrameReader,
    encode_frame,
    encode_transfer_frames,
)
from gateway.amqp._performative_codec import (
    encode_performative_into,
    from_described,
    to_described,
)
from gateway.amqp._performatives import (
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Flow,
    Open,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    Transfer,
)

ERROR = Error(condition="amqp:not-found", description="no such entity", info={"k": "v"})
SELECTOR = Described(Symbol("apache.org:selector-filter:string"), "amount > 5")

FULL = [
    Open(container_id="c1", hostname="ns.local", max_frame_size=65536, channel_max=255,
         idle_time_out=120000, outgoing_locales=("en-US",), incoming_locales=("en-US", "fr"),
         offered_capabilities=("ANONYMOUS-RELAY",), desired_capabilities=("x",),
         properties={"product": "geogateway"}),
    Begin(remote_channel=3, next_outgoing_id=1, incoming_window=5000, outgoing_window=2**32 - 1,
          handle_max=255, offered_capabilities=("a",), desired_capabilities=("b",),
          properties={"p": 1}),
    Attach(name="sender-link", handle=7, role=True, snd_settle_mode=1, rcv_settle_mode=1,
           source=Source(address="orders", durable=2, expiry_policy="never", timeout=30,
                         dynamic=True, dynamic_node_properties={"lifetime": 1},
                         distribution_mode="move", filter={"selector": SELECTOR},
                         default_outcome=Modified(delivery_failed=True, undeliverable_here=False,
                                                  message_annotations={"x-opt-a": 1}),
                         outcomes=("amqp:accepted:list", "amqp:rejected:list"),
                         capabilities=("queue",)),
           target=Target(address="orders", durable=1, expiry_policy="link-detach", timeout=5,
                         dynamic=False, dynamic_node_properties={"n": None},
                         capabilities=("topic",)),
           unsettled={b"tag-1": Accepted(), b"tag-2": Released()}, incomplete_unsettled=True,
           initial_delivery_count=10, max_message_size=2**40, offered_capabilities=("o",),
           desired_capabilities=("d",), properties={"com.microsoft:timeout": 60000}),
    Flow(next_incoming_id=4, incoming_window=5000, next_outgoing_id=9, outgoing_window=100,
         handle=7, delivery_count=3, link_credit=300, available=2, drain=True, echo=True,
         properties={"f": True}),
    Transfer(handle=7, delivery_id=2**32 - 1, delivery_tag=b"\x00\x01", message_format=0x80013700,
             settled=False, more=True, rcv_settle_mode=1,
             state=Received(section_number=1, section_offset=2**40), resume=True, aborted=True,
             batchable=True),
    Disposition(role=True, first=1, last=3, settled=True, state=Rejected(error=ERROR),
                batchable=True),
    Detach(handle=7, closed=True, error=ERROR),
    End(error=ERROR),
    Close(error=ERROR),
    SaslMechanisms(sasl_server_mechanisms=("MSSBCBS", "PLAIN", "ANONYMOUS")),
    SaslInit(mechanism="PLAIN", initial_response=b"\x00user\x00pass", hostname="ns.local"),
    SaslChallenge(challenge=b"challenge"),
    SaslResponse(response=b"response"),
    SaslOutcome(code=0, additional_data=b"welcome"),
]  # fmt: skip

MINIMAL = [
    Open(container_id="c"),
    Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1),
    Attach(name="l", handle=0, role=False),
    Flow(incoming_window=1, next_outgoing_id=0, outgoing_window=1),
    Transfer(handle=0),
    Disposition(role=False, first=0),
    Detach(handle=0),
    End(),
    Close(),
    SaslMechanisms(sasl_server_mechanisms=("ANONYMOUS",)),
    SaslInit(mechanism="ANONYMOUS"),
    SaslChallenge(challenge=b""),
    SaslResponse(response=b""),
    SaslOutcome(code=1),
]

#: The number of fields each performative has in the AMQP 1.0 spec.
SPEC_FIELD_COUNTS = {
    Open: 10, Begin: 8, Attach: 14, Flow: 11, Transfer: 11, Disposition: 6, Detach: 3, End: 1,
    Close: 1, SaslMechanisms: 1, SaslInit: 3, SaslChallenge: 1, SaslResponse: 1, SaslOutcome: 2,
    Error: 3, Source: 11, Target: 7, Received: 2, Accepted: 0, Rejected: 1, Released: 0,
    Modified: 3,
}  # fmt: skip


def frame_type_of(body: object) -> int:
    return FRAME_SASL if type(body).__name__.startswith("Sasl") else FRAME_AMQP


def frame_of(body: object, channel: int = 0, payload: bytes = b"") -> Frame:
    return Frame(frame_type_of(body), channel, body, payload)  # type: ignore[arg-type]


def read_all(data: bytes, reader: FrameReader | None = None) -> list[Any]:
    reader = reader or FrameReader()
    reader.feed(AMQP_HEADER)
    return reader.feed(data)


def values_of(body: object) -> Any:
    """The field values ``to_described`` writes for ``body``."""
    return to_described(body).value


def ids(bodies: list[object]) -> list[str]:
    return [type(b).__name__ for b in bodies]


# -- performatives ---------------------------------------------------------------------


@pytest.mark.parametrize("body", FULL + MINIMAL, ids=ids(FULL) + ids(MINIMAL))
def test_every_performative_round_trips_through_a_frame(body):
    # Given a performative in a frame / When it is encoded and read back
    frame = frame_of(body, channel=5)
    (decoded,) = read_all(encode_frame(frame))
    # Then the frame and every field come back equal
    assert decoded == frame


@pytest.mark.parametrize("cls", list(SPEC_FIELD_COUNTS), ids=lambda c: c.__name__)
def test_every_class_has_its_spec_fields_descriptor_and_name(cls):
    assert len(dataclasses.fields(cls)) == SPEC_FIELD_COUNTS[cls]
    assert cls.NAME.startswith("amqp:") and cls.NAME.endswith(":list")
    assert 0x10 <= cls.DESCRIPTOR <= 0x44


@pytest.mark.parametrize("body", MINIMAL, ids=ids(MINIMAL))
def test_every_field_is_written_even_trailing_nulls(body):
    described = to_described(body)
    assert described.descriptor == body.DESCRIPTOR and type(described.descriptor) is ULong
    assert len(values_of(body)) == SPEC_FIELD_COUNTS[type(body)]


@pytest.mark.parametrize("body", FULL + MINIMAL, ids=ids(FULL) + ids(MINIMAL))
def test_the_direct_writer_matches_the_described_form(body):
    # encode_frame writes fields straight to bytes; to_described reads them back typed
    buf = bytearray()
    encode_performative_into(buf, body)
    assert bytes(buf) == encode(to_described(body))


def test_fields_are_written_as_their_spec_types():
    # Given plain Python values in the fields / When written
    attach = values_of(FULL[2])
    # Then each has its AMQP type
    assert [type(v) for v in attach[:5]] == [str, UInt, bool, UByte, UByte]
    assert type(attach[10]) is ULong and type(attach[9]) is UInt
    assert attach[11] == Array((Symbol("o"),), "symbol")
    assert all(type(k) is Symbol for k in attach[13])
    source = attach[5]
    assert source.descriptor == 0x28 and type(source.value[2]) is Symbol
    assert type(source.value[8]) is Described and source.value[8].descriptor == 0x27
    open_ = values_of(FULL[0])
    assert [type(v) for v in open_[2:5]] == [UInt, UShort, UInt]
    error = values_of(ERROR)
    assert type(error[0]) is Symbol and list(error[2]) == ["k"]


def test_already_typed_values_are_accepted():
    flow = Flow(incoming_window=UInt(1), next_outgoing_id=UInt(2), outgoing_window=ULong(3),
                properties={Symbol("k"): 1}, handle=UInt(0))  # fmt: skip
    assert from_described(to_described(flow)) == flow
    mechanisms = SaslMechanisms(sasl_server_mechanisms=Array((Symbol("PLAIN"),), "symbol"))  # type: ignore[arg-type]
    assert from_described(to_described(mechanisms)).sasl_server_mechanisms == ("PLAIN",)
    assert from_described(to_described(SaslMechanisms(sasl_server_mechanisms="PLAIN")))


def test_wrong_values_in_fields_raise_type_or_value_error():
    with pytest.raises(ValueError):
        to_described(Attach(name="l", handle=-1, role=False))
    with pytest.raises(TypeError):
        to_described(Attach(name="l", handle=0, role="sender"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        to_described(Attach(name="l", handle=0, role=False, source="orders"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        to_described("not a performative")
    with pytest.raises(ValueError):
        to_described(Open(container_id="c", properties={"é": 1}))
    with pytest.raises(ValueError):
        to_described(Transfer(handle=0, rcv_settle_mode=256))
    with pytest.raises(TypeError):
        to_described(Transfer(handle=0, delivery_tag="text"))  # type: ignore[arg-type]


def test_shortened_lists_take_defaults_and_extra_fields_are_ignored():
    # Given an Attach with only its mandatory fields, and a Flow with extra fields
    attach = from_described(Described(ULong(0x12), ["l", UInt(1), True]))
    flow = from_described(
        Described(ULong(0x13), [None, 1, 2, 3, None, None, None, None, None, None, None, "x"])
    )
    # Then missing and null fields read as their defaults
    assert attach == Attach(name="l", handle=1, role=True)
    assert (attach.snd_settle_mode, attach.rcv_settle_mode, attach.source) == (2, 0, None)
    assert (flow.drain, flow.echo, flow.handle) == (False, False, None)
    open_ = from_described(Described(ULong(0x10), ["c", None, None]))
    assert (open_.max_frame_size, open_.channel_max) == (0xFFFFFFFF, 0xFFFF)


def test_symbolic_descriptors_are_understood():
    value = Described(Symbol("amqp:detach:list"), [UInt(1), True])
    assert from_described(value) == Detach(handle=1, closed=True)


def test_unknown_nested_described_values_stay_described():
    coordinator = Described(ULong(0x30), [Array((Symbol("amqp:local-transactions"),), "symbol")])
    declared = Described(ULong(0x33), [b"txn"])
    attach = Attach(name="txn", handle=0, role=False, target=coordinator)
    transfer = Transfer(handle=0, state=declared)
    assert from_described(to_described(attach)).target == coordinator
    assert from_described(to_described(transfer)).state == declared


@pytest.mark.parametrize(
    "value",
    [
        Described(ULong(0x99), []),
        Described(ULong(0x12), {"not": "a list"}),
        Described(ULong(0x12), ["l", UInt(1)]),  # role is mandatory
        Described(ULong(0x12), ["l", "one", True]),
        Described(ULong(0x12), ["l", True, True]),  # a bool is not a handle
        Described(ULong(0x12), ["l", UInt(1), 1]),
        Described(ULong(0x12), ["l", UInt(1), True, None, None, "not a source"]),
        Described(ULong(0x10), ["c", None, None, None, None, [1]]),
        Described(ULong(0x10), ["c", None, None, None, None, Array(("é",), "string")]),
        Described(ULong(0x10), [b"c"]),
        Described(ULong(0x14), [UInt(0), None, "tag"]),
        Described([1], []),
    ],
)
def test_wrong_shapes_raise_decode_error(value):
    with pytest.raises(DecodeError):
        from_described(value)


# -- frames ----------------------------------------------------------------------------


def test_transfer_payload_follows_the_performative():
    frame = Frame(FRAME_AMQP, 1, Transfer(handle=0, delivery_id=0, delivery_tag=b"t"), b"body")
    assert read_all(encode_frame(frame)) == [frame]


def test_empty_frames_are_heartbeats():
    data = encode_frame(Frame(FRAME_AMQP, 0, None))
    assert data == b"\x00\x00\x00\x08\x02\x00\x00\x00"
    assert read_all(data) == [Frame(FRAME_AMQP, 0, None)]
    # an extended header without a body is a heartbeat too
    assert read_all(b"\x00\x00\x00\x0c\x03\x00\x00\x07" + bytes(4)) == [Frame(FRAME_AMQP, 7, None)]
    with pytest.raises(ValueError):
        encode_frame(Frame(FRAME_AMQP, 0, None, b"payload"))


def test_an_extended_header_is_skipped():
    body = encode(to_described(End()))
    data = struct.pack(">IBBH", 16 + len(body), 4, 0, 2) + b"extended" + body
    assert read_all(data) == [Frame(FRAME_AMQP, 2, End())]


def test_headers_are_returned_as_bytes_when_expected():
    # Given a SASL exchange then the AMQP header, as a client sends them
    reader = FrameReader()
    init = encode_frame(frame_of(SaslInit(mechanism="ANONYMOUS")))
    open_ = encode_frame(frame_of(Open(container_id="c")))
    # When fed / Then headers come back as bytes, in order with frames
    sasl_init = frame_of(SaslInit(mechanism="ANONYMOUS"))
    assert reader.feed(SASL_HEADER + init) == [SASL_HEADER, sasl_init]
    reader.expect_header()
    assert reader.feed(AMQP_HEADER + open_) == [AMQP_HEADER, frame_of(Open(container_id="c"))]


def test_a_pipelined_amqp_header_is_recognised_without_expect_header():
    reader = FrameReader()
    init = encode_frame(frame_of(SaslInit(mechanism="ANONYMOUS")))
    items = reader.feed(SASL_HEADER + init + AMQP_HEADER + encode_frame(frame_of(Close())))
    assert items[2] == AMQP_HEADER and items[3] == frame_of(Close())


def test_any_8_bytes_are_returned_when_a_header_is_expected():
    assert FrameReader().feed(b"HTTP/1.1 200") == [b"HTTP/1.1"]


def test_frames_split_at_every_byte_boundary_read_the_same():
    # Given a stream of a header and several frames
    stream = AMQP_HEADER + b"".join(
        encode_frame(frame_of(body, i, b"ppp" if isinstance(body, Transfer) else b""))
        for i, body in enumerate(FULL[:9])
    )
    expected = FrameReader().feed(stream)
    assert len(expected) == 10
    # When it arrives in two pieces split at any offset, or byte by byte
    for cut in range(len(stream) + 1):
        reader = FrameReader()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == expected
    reader = FrameReader()
    assert [item for octet in stream for item in reader.feed(bytes([octet]))] == expected


def test_max_frame_size_is_enforced_and_settable():
    reader = FrameReader(max_frame_size=MIN_MAX_FRAME_SIZE)
    reader.feed(AMQP_HEADER)
    big = encode_frame(frame_of(Transfer(handle=0), payload=b"x" * 600))
    with pytest.raises(FrameError) as info:
        reader.feed(big[:8])  # refused as soon as the header arrives
    assert info.value.condition == FRAMING_ERROR
    reader = FrameReader(max_frame_size=512)
    reader.max_frame_size = 4096
    assert len(read_all(big, reader)) == 1
    with pytest.raises(ValueError):
        reader.max_frame_size = 511


BAD_FRAMES = {
    "size below 8": (struct.pack(">IBBH", 7, 2, 0, 0), FRAMING_ERROR),
    "size zero": (bytes(8), FRAMING_ERROR),
    "doff below 2": (struct.pack(">IBBH", 8, 1, 0, 0), FRAMING_ERROR),
    "doff beyond frame": (struct.pack(">IBBH", 8, 3, 0, 0), FRAMING_ERROR),
    "size over max": (struct.pack(">IBBH", (1 << 20) + 1, 2, 0, 0), FRAMING_ERROR),
    "unknown frame type": (struct.pack(">IBBH", 8, 2, 7, 0), FRAMING_ERROR),
    "body is not described": (encode([1, 2]), DECODE_ERROR),
    "body is a composite, not a performative": (encode(to_described(ERROR)), DECODE_ERROR),
    "unknown descriptor": (encode(Described(ULong(0x99), [])), DECODE_ERROR),
    "undecodable body": (b"\x00\x53\x10\xc0\xff", DECODE_ERROR),
    "invalid constructor": (b"\xff", DECODE_ERROR),
    "mandatory field missing": (encode(Described(ULong(0x12), ["l"])), DECODE_ERROR),
}


@pytest.mark.parametrize(("data", "condition"), BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_bad_frames_raise_frame_error_with_the_right_condition(data, condition):
    if condition == DECODE_ERROR:  # data is a body; wrap it in a valid frame header
        data = struct.pack(">IBBH", 8 + len(data), 2, 0, 0) + data
    reader = FrameReader()
    reader.feed(AMQP_HEADER)
    with pytest.raises(FrameError) as info:
        reader.feed(data)
    assert info.value.condition == condition
    # And the reader stays broken
    with pytest.raises(FrameError) as again:
        reader.feed(encode_frame(frame_of(Close())))
    assert again.value is info.value


@pytest.mark.parametrize(
    ("frame_type", "body"), [(FRAME_AMQP, SaslInit(mechanism="PLAIN")), (FRAME_SASL, Close())]
)
def test_a_performative_in_the_wrong_frame_type_is_refused(frame_type, body):
    data = encode_frame(Frame(frame_type, 0, body))
    with pytest.raises(FrameError) as info:
        read_all(data)
    assert info.value.condition == DECODE_ERROR


def test_encode_frame_refuses_bad_headers():
    with pytest.raises(ValueError):
        encode_frame(Frame(FRAME_AMQP, 70000, Close()))


def test_large_deliveries_are_split_into_transfer_frames():
    # Given a payload far larger than the frame size
    transfer = Transfer(handle=1, delivery_id=4, delivery_tag=b"t", message_format=0)
    payload = bytes(range(256)) * 40
    frames = encode_transfer_frames(2, transfer, payload, 1000)
    # Then every frame fits, all but the last say "more", and the payload reassembles
    assert all(len(f) <= 1000 for f in frames) and len(frames) == 11
    read = read_all(b"".join(frames))
    assert [f.body.more for f in read] == [True] * 10 + [False]
    assert b"".join(f.payload for f in read) == payload
    assert all(f.channel == 2 and f.body.delivery_id == 4 for f in read)
    # A payload that fits is one frame, the same as encode_frame gives
    assert encode_transfer_frames(2, transfer, b"x", 1000) == [
        encode_frame(Frame(FRAME_AMQP, 2, transfer, b"x"))
    ]
    with pytest.raises(ValueError):
        encode_transfer_frames(2, transfer, payload, 20)


# -- interop with the Azure SDKs -------------------------------------------------------

SDK_DECODERS = [
    pytest.param(sb_decode, id="servicebus"),
    pytest.param(eh_decode, id="eventhub"),
]
_SDK_COMPOSITES: dict[object, str] = {
    0x23: "received", 0x24: "accepted", 0x25: "rejected", 0x26: "released", 0x27: "modified",
}  # fmt: skip


def sdk_form(value: object) -> object:
    """What the SDK decoder makes of one of our values: strings as bytes, descriptors
    dropped except for delivery states."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list | tuple):
        return [sdk_form(x) for x in value]
    if isinstance(value, Array):
        return [sdk_form(x) for x in value.items]
    if isinstance(value, dict):
        return {sdk_form(k): sdk_form(v) for k, v in value.items()}
    if isinstance(value, Described):
        name = _SDK_COMPOSITES.get(value.descriptor)
        return {name: sdk_form(value.value)} if name else sdk_form(value.value)
    return value


@pytest.mark.parametrize("decoder", SDK_DECODERS)
@pytest.mark.parametrize("body", FULL + MINIMAL, ids=ids(FULL) + ids(MINIMAL))
def test_the_sdk_reads_every_field_we_write(decoder, body):
    # Given our frame / When the SDK decodes its body
    payload = b"message" if isinstance(body, Transfer) else b""
    data = encode_frame(frame_of(body, payload=payload))
    code, fields = decoder.decode_frame(memoryview(data)[8:])
    # Then it sees the performative with all its fields, in order
    assert code == body.DESCRIPTOR
    expected = sdk_form(values_of(body))
    if isinstance(body, Transfer):
        assert bytes(fields.pop()) == payload
    assert len(fields) == SPEC_FIELD_COUNTS[type(body)]
    if body in FULL:  # (the Service Bus copy replaces nulls with defaults)
        assert fields == expected


def sdk_frame(performative: object, channel: int = 0, frame_type: bytes = b"\x00") -> bytes:
    header, body = sdk_encode.encode_frame(performative, frame_type)  # type: ignore[arg-type]
    return header + struct.pack(">H", channel) + (body or b"")


def test_we_read_the_frames_the_sdk_writes():
    # Given frames as the SDK writes them
    source = sdk_endpoints.Source(
        address="amqps://ns/orders/$management", durable=None, expiry_policy=None, timeout=None,
        dynamic=None, dynamic_node_properties=None, distribution_mode=None,
        filters={"com.microsoft:session-filter": "s1"}, default_outcome=None, outcomes=None,
        capabilities=None,
    )  # fmt: skip
    target = sdk_endpoints.Target(address="orders", durable=None, expiry_policy=None,
                                  timeout=None, dynamic=None, dynamic_node_properties=None,
                                  capabilities=None)  # fmt: skip
    frames = [
        sdk.OpenFrame(container_id="sdk", hostname="ns", max_frame_size=65536, channel_max=65535,
                      idle_timeout=120000, outgoing_locales=None, incoming_locales=None,
                      offered_capabilities=None, desired_capabilities=["cap"],
                      properties={"product": "azsdk"}),
        sdk.BeginFrame(remote_channel=None, next_outgoing_id=0, incoming_window=5000,
                       outgoing_window=5000, handle_max=4294967295, offered_capabilities=None,
                       desired_capabilities=None, properties=None),
        sdk.AttachFrame(name="link", handle=3, role=True, send_settle_mode=0, rcv_settle_mode=1,
                        source=source, target=target, unsettled=None, incomplete_unsettled=False,
                        initial_delivery_count=None, max_message_size=1048576,
                        offered_capabilities=None, desired_capabilities=None,
                        properties={"com.microsoft:receiver-name": "r"}),
        sdk.FlowFrame(next_incoming_id=0, incoming_window=5000, next_outgoing_id=1,
                      outgoing_window=5000, handle=3, delivery_count=0, link_credit=300,
                      available=None, drain=None, echo=None, properties=None),
        sdk.TransferFrame(handle=3, delivery_id=0, delivery_tag=b"\x01\x00\x00\x00",
                          message_format=0, settled=False, more=False, payload=b"msg"),
        sdk.DispositionFrame(role=True, first=0, last=0, settled=True,
                             state=sdk_outcomes.Accepted(), batchable=None),
        sdk.DispositionFrame(role=True, first=1, last=2, settled=True,
                             state=sdk_outcomes.Modified(delivery_failed=True,
                                                         undeliverable_here=None,
                                                         message_annotations=None),
                             batchable=None),
        sdk.DetachFrame(handle=3, closed=True,
                        error=sdk_error.AMQPError(condition=b"amqp:link:detach-forced",
                                                  description="bye")),
        sdk.CloseFrame(error=None),
    ]  # fmt: skip
    # When our reader reads them
    read = read_all(b"".join(sdk_frame(f, channel=2) for f in frames))
    bodies = [f.body for f in read]
    # Then each field comes through
    assert bodies[0] == Open(container_id="sdk", hostname="ns", max_frame_size=65536,
                             idle_time_out=120000, desired_capabilities=("cap",),
                             properties={"product": "azsdk"})  # fmt: skip
    assert bodies[1] == Begin(next_outgoing_id=0, incoming_window=5000, outgoing_window=5000)
    assert bodies[2] == Attach(
        name="link", handle=3, role=True, snd_settle_mode=0, rcv_settle_mode=1,
        source=Source(address="amqps://ns/orders/$management",
                      filter={"com.microsoft:session-filter": "s1"}),
        target=Target(address="orders"), max_message_size=1048576,
        properties={"com.microsoft:receiver-name": "r"},
    )  # fmt: skip
    assert bodies[3] == Flow(
        next_incoming_id=0, incoming_window=5000, next_outgoing_id=1, outgoing_window=5000,
        handle=3, delivery_count=0, link_credit=300,
    )  # fmt: skip
    assert bodies[4] == Transfer(handle=3, delivery_id=0, delivery_tag=b"\x01\x00\x00\x00",
                                 message_format=0, settled=False)  # fmt: skip
    assert read[4].payload == b"msg"
    assert bodies[5] == Disposition(role=True, first=0, last=0, settled=True, state=Accepted())
    assert bodies[6].state == Modified(delivery_failed=True)
    assert bodies[7] == Detach(handle=3, closed=True, error=Error(
        condition="amqp:link:detach-forced", description="bye"))  # fmt: skip
    assert bodies[8] == Close()
    assert {f.channel for f in read} == {2}


def test_we_read_the_sasl_frames_the_sdk_writes():
    frames = [
        sdk.SASLInit(mechanism=b"MSSBCBS", initial_response=b"", hostname="ns"),
        sdk.SASLMechanism(sasl_server_mechanisms=[b"PLAIN", b"MSSBCBS"]),
        sdk.SASLOutcome(code=0, additional_data=None),
    ]
    reader = FrameReader()
    reader.feed(SASL_HEADER)
    read: list[Any] = reader.feed(b"".join(sdk_frame(f, 0, b"\x01") for f in frames))
    bodies = [f.body for f in read]
    assert bodies == [
        SaslInit(mechanism="MSSBCBS", initial_response=b"", hostname="ns"),
        SaslMechanisms(sasl_server_mechanisms=("PLAIN", "MSSBCBS")),
        SaslOutcome(code=0),
    ]


# -- hostile input ---------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_after_the_header_raise_only_frame_error(data):
    reader = FrameReader(max_frame_size=4096)
    reader.feed(AMQP_HEADER)
    try:
        reader.feed(data)
    except FrameError as exc:
        assert exc.condition in (DECODE_ERROR, FRAMING_ERROR)


SEEDS = [
    encode_frame(frame_of(FULL[2], channel=1)),
    encode_frame(frame_of(FULL[4], channel=1, payload=b"payload" * 5)),
    encode_frame(frame_of(FULL[5])),
    encode_frame(frame_of(FULL[0])),
]


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(SEEDS),
    st.lists(
        st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10_000),
                  st.integers(0, 255)),
        min_size=1, max_size=4,
    ),
)  # fmt: skip
def test_mutated_frames_raise_only_frame_error(seed, mutations):
    # Given a valid frame with bytes flipped, inserted or deleted
    data = bytearray(seed)
    for action, index, octet in mutations:
        index %= len(data) or 1
        if action == "flip" and data:
            data[index] = octet
        elif action == "insert":
            data.insert(index, octet)
        elif data:
            del data[index]
    # When read / Then it decodes or raises FrameError, nothing else
    reader = FrameReader(max_frame_size=4096)
    reader.feed(AMQP_HEADER)
    try:
        for item in reader.feed(bytes(data)):
            assert isinstance(item, Frame | bytes)
    except FrameError as exc:
        assert exc.condition in (DECODE_ERROR, FRAMING_ERROR)


def test_a_slice_of_the_buffer_still_alive_does_not_break_the_reader():
    # A memoryview slice of the read buffer can outlive a parse (held by garbage the
    # collector has not freed yet, such as a caught exception's traceback); the
    # buffer must then not be resized in place (BufferError) but replaced.
    frame = encode_frame(Frame(FRAME_AMQP, 1, Transfer(handle=0, delivery_id=0,
                                                       delivery_tag=b"t"), b"body"))
    reader = FrameReader()
    reader.feed(AMQP_HEADER)
    assert reader.feed(frame[:10]) == []
    alive = memoryview(reader._buf)[:4]
    # When the rest arrives, and then another frame, while the slice lives
    first = reader.feed(frame[10:])
    alive2 = memoryview(reader._buf)[:1]
    second = reader.feed(frame)
    # Then both frames are read
    assert [f.payload for f in (*first, *second)] == [b"body", b"body"]
    alive.release()
    alive2.release()
