"""Message: body coercion, ids, properties, equality, size and a repr without payload."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re

import pytest

from replication import Message, MessageRejected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"raw", b"raw"),
        ("h\u00e9llo", "h\u00e9llo".encode()),
        (bytearray(b"ba"), b"ba"),
        (memoryview(b"mv"), b"mv"),
    ],
)
def test_body_is_stored_as_bytes(body, expected):
    # Given a body of a bytes-like or str type / When a message is built
    message = Message(body)
    # Then the body is bytes (str encoded as UTF-8)
    assert type(message.body) is bytes
    assert message.body == expected


@pytest.mark.parametrize("body", [1, None, ["x"], {"a": 1}])
def test_other_bodies_are_a_type_error(body):
    with pytest.raises(TypeError, match="body must be bytes or str"):
        Message(body)  # type: ignore[arg-type]


def test_a_message_id_is_generated_when_missing_and_unique():
    # Given two messages without an id / Then each gets a distinct UUID4 hex
    first, second = Message(b"x"), Message(b"x")
    assert re.fullmatch(r"[0-9a-f]{32}", first.message_id)
    assert first.message_id != second.message_id


def test_an_explicit_message_id_is_kept():
    assert Message(b"x", message_id="order-42").message_id == "order-42"


def test_a_message_id_that_is_not_text_is_a_type_error():
    with pytest.raises(TypeError, match="message_id"):
        Message(b"x", message_id=42)  # type: ignore[arg-type]


def test_properties_are_copied_and_read_only():
    # Given a properties dict
    props = {"kind": "order", "n": 3, "ratio": 0.5, "urgent": True, "note": None}
    # When a message is built and the dict is changed afterwards
    message = Message(b"x", properties=props)
    props["kind"] = "changed"
    # Then the message keeps its own copy and refuses changes
    assert message.properties["kind"] == "order"
    assert dict(message.properties) == {**props, "kind": "order"}
    with pytest.raises(TypeError):
        message.properties["kind"] = "x"  # type: ignore[index]


def test_a_property_name_that_is_not_text_is_a_type_error():
    with pytest.raises(TypeError, match="property names must be str"):
        Message(b"x", properties={1: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("value", "kind"),
    [({"a": 1}, "dict"), ([{"a": 1}, {"b": 2}], "list"), ([1], "list"), (b"bytes", "bytes"),
     (object(), "object")],
)
def test_a_property_value_that_is_not_a_scalar_is_rejected_naming_it(value, kind):
    # Given a nested dict (or a list of dicts, bytes...) as a property value
    # When the message is built
    with pytest.raises(MessageRejected) as raised:
        Message(b"x", properties={"ok": 1, "nested": value})
    # Then it is one line naming the property, what it is, and the allowed types
    message = str(raised.value)
    assert "\n" not in message
    assert f"property 'nested' is a {kind}" in message
    assert "str, int, float, bool or None" in message


def test_messages_with_the_same_fields_are_equal_and_hash_alike():
    # Given two messages built from the same values
    one = Message(b"x", message_id="id-1", partition_key="p", properties={"a": 1})
    two = Message("x", message_id="id-1", partition_key="p", properties={"a": 1})
    # Then they are equal, hash alike and collapse in a set
    assert one == two
    assert hash(one) == hash(two)
    assert len({one, two}) == 1
    # And a different id makes a different message
    assert one != dataclasses.replace(one, message_id="id-2")


def test_a_message_without_properties_equals_one_with_empty_properties():
    assert Message(b"x", message_id="i") == Message(b"x", message_id="i", properties={})


def test_size_counts_body_id_key_and_properties():
    message = Message(b"12345", message_id="abc", partition_key="pk", properties={"k": 10})
    assert message.size == 5 + 3 + 2 + (1 + 2)


def test_repr_shows_the_id_and_length_but_never_the_body():
    # Given a message whose body is sensitive
    message = Message(b"TOPSECRETPAYLOAD", message_id="id-7", partition_key="p")
    # When it is shown / Then the body is absent and its size is given instead
    text = repr(message)
    assert "TOPSECRETPAYLOAD" not in text
    assert "'id-7'" in text and "16 bytes" in text
    assert "TOPSECRETPAYLOAD" not in str(message)


def test_message_is_frozen():
    message = Message(b"x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.body = b"y"  # type: ignore[misc]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_message_survives_pickling(protocol):
    # Given a message with properties / When it is pickled and loaded
    message = Message(b"x", message_id="id-1", partition_key="p", properties={"a": 1})
    loaded = pickle.loads(pickle.dumps(message, protocol=protocol))
    # Then it is an equal message whose properties are still read-only
    assert loaded == message
    assert dict(loaded.properties) == {"a": 1}
    with pytest.raises(TypeError):
        loaded.properties["a"] = 2  # type: ignore[index]


def test_message_can_be_deep_copied():
    message = Message(b"x", properties={"a": 1})
    assert copy.deepcopy(message) == message


@pytest.mark.parametrize(
    ("fields", "what"),
    [
        ({"message_id": "id-\ud800"}, "message_id"),
        # What os.fsdecode makes of a command-line argument that is not UTF-8.
        ({"body": "caf\udce9"}, "body"),
        ({"partition_key": "\udcff"}, "partition_key"),
        ({"properties": {"k\udc80": 1}}, "property name"),
        ({"properties": {"k": "v\udfff"}}, "property 'k'"),
    ],
)
def test_text_that_is_not_valid_unicode_is_rejected_as_a_gateway_error(fields, what):
    # Given a lone surrogate, which UTF-8 cannot encode (and so no namespace can carry)
    from replication import GatewayError, MessageRejected

    # When a message is built with it / Then MessageRejected (a GatewayError) says which
    # field, instead of a UnicodeEncodeError at send time or in the durable queue
    with pytest.raises(MessageRejected, match=what) as info:
        Message(**{"body": b"x", **fields})
    assert isinstance(info.value, GatewayError)


def test_non_ascii_ids_and_keys_that_are_valid_unicode_are_kept():
    message = Message("x", message_id="r\u00e9gion-\U0001f600", partition_key="\u00fc",
                      properties={"cl\u00e9": "v\u00e4lue"})
    assert message.message_id == "r\u00e9gion-\U0001f600" and message.partition_key == "\u00fc"


def test_a_session_id_is_kept_counted_compared_and_pickled():
    # Given a message of a session
    message = Message(b"x", message_id="m", session_id="order-7")
    # Then it is kept, counted in the size, shown in the repr and compared
    assert message.session_id == "order-7"
    assert message.size == Message(b"x", message_id="m").size + len("order-7")
    assert "session_id='order-7'" in repr(message)
    assert message != Message(b"x", message_id="m")
    # and it survives pickling
    assert pickle.loads(pickle.dumps(message)).session_id == "order-7"


def test_a_session_id_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="session_id must be a str"):
        Message(b"x", session_id=7)  # type: ignore[arg-type]
    with pytest.raises(MessageRejected, match="session_id"):
        Message(b"x", session_id="bad \udc80")


def test_with_properties_keeps_every_field_of_the_message():
    from replication import Message, with_properties

    message = Message(b"x", message_id="m1", partition_key="k", session_id="s1",
                      properties={"a": 1})
    (copy,) = with_properties([message], {"b": 2})
    assert (copy.body, copy.message_id, copy.partition_key, copy.session_id) == (
        b"x", "m1", "k", "s1")
    assert dict(copy.properties) == {"a": 1, "b": 2}
