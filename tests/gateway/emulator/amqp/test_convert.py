"""What a queue keeps of an AMQP message, and the wire form it delivers (unit tests)."""

from __future__ import annotations

import uuid

import pytest

from gateway.amqp._codec import Described, Int, Symbol, Timestamp, UInt, encode
from gateway.amqp._message import (
    AmqpMessage,
    Header,
    Properties,
    decode_message,
    encode_message,
    split_sections,
)
from gateway.amqp.server import queue_message, queue_payload, to_queued
from gateway.transports.base import ReceivedMessage
from replication import Message

SENT = AmqpMessage(
    header=Header(durable=True, priority=7, ttl=UInt(60_000)),
    delivery_annotations={"x-hop": 1},
    message_annotations={"x-opt-partition-key": "k", "x-opt-scheduled-enqueue-time":
                         Timestamp(1_700_000_000_000), "x-custom": Int(5)},
    properties=Properties(message_id="m", correlation_id=uuid.UUID(int=7), subject="s",
                          content_type="text/plain", group_id="g", group_sequence=3),
    application_properties={"i": Int(1), "u": uuid.UUID(int=9), "t": Timestamp(5), "b": b"\x00"},
    data=[b"bo", b"dy"],
    footer={"x-f": "f"},
)


def _received(queued_message: Message, entity: str = "orders") -> ReceivedMessage:
    return ReceivedMessage(message=queued_message, namespace="primary", entity=entity,
                           lock_token="ab" * 16, sequence_number=12, delivery_count=3,
                           enqueued_time=1_700_000_000.5, locked_until=1_700_000_030.5)


def test_a_queue_keeps_every_section_but_the_body_and_the_delivery_annotations() -> None:
    q = to_queued(encode_message(SENT))
    assert (q.message.message_id, q.message.body, q.message.partition_key) == ("m", b"body", "k")
    assert (q.scheduled_time, q.time_to_live) == (1_700_000_000.0, 60.0)
    assert q.sections is not None
    kept = decode_message(q.sections)
    assert (kept.header, kept.message_annotations, kept.properties) == (
        SENT.header, SENT.message_annotations, SENT.properties)
    assert (kept.application_properties, kept.footer) == (SENT.application_properties,
                                                          SENT.footer)
    assert kept.delivery_annotations is None and kept.data is None


@pytest.mark.parametrize("entity", ["orders", "orders/$DeadLetterQueue"])
def test_the_quick_wire_form_is_the_decoded_one(entity: str) -> None:
    # Given a kept message (dead-lettered: the queue added its reason to its properties)
    q = to_queued(encode_message(SENT))
    message = q.message
    if entity.endswith("Queue"):
        message = Message(message.body, message.message_id, message.partition_key,
                          {**message.properties, "DeadLetterReason": "why"})
    r = _received(message, entity)
    # When it is delivered, then the quick encoding decodes to the full one
    quick = decode_message(queue_payload(r, sections=q.sections, dead_letter_source="orders"))
    full = queue_message(r, sections=q.sections, dead_letter_source="orders")
    assert quick == full
    # with the broker's annotations over the sender's, and the sender's types kept
    assert full.header is not None and full.header.delivery_count == 2
    assert full.message_annotations is not None
    assert full.message_annotations["x-opt-sequence-number"] == 12
    assert full.message_annotations["x-custom"] == 5
    assert full.application_properties is not None
    assert type(full.application_properties["u"]) is uuid.UUID
    assert type(full.application_properties["t"]) is Timestamp
    assert full.data == [b"body"] and full.footer == {"x-f": "f"}
    if entity.endswith("Queue"):
        assert full.application_properties["DeadLetterReason"] == "why"


def test_sections_in_an_unusual_form_are_decoded_instead() -> None:
    # A section with a symbolic descriptor is valid AMQP, but not the form split_sections reads
    unusual = encode(Described(Symbol("amqp:properties:list"), ["m"])) + encode_message(
        AmqpMessage(data=[b"x"]))
    q = to_queued(unusual)
    assert q.sections is not None and split_sections(q.sections) is not None
    r = _received(q.message)
    assert decode_message(queue_payload(r, sections=q.sections)) == queue_message(
        r, sections=q.sections)
    assert split_sections(encode(Described(Symbol("amqp:properties:list"), ["m"]))) is None
