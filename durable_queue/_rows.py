"""Rows of the queue file back into records, fast.

``get_batch`` builds a hundred records per call. A frozen dataclass's generated
``__init__`` (one ``object.__setattr__`` per field) plus ``Message``'s validation
cost ~8 µs per message on the benchmark machine, three times SQLite's own read.
The rows come from our own inserts of already validated ``Message`` objects, so
when the classes have the shape checked below, the instances' ``__dict__`` is
filled directly, exactly as the generated ``__init__`` would; otherwise (a future
``Message`` with other fields or slots) the constructors are used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from durable_queue._records import DeadLetteredMessage, StoredMessage
from replication import Message

__all__ = ["COLUMNS", "FAST", "SESSION_KEY", "dead_from_row", "encode_properties",
           "message_from_row", "split_properties", "stored_from_rows"]

#: The stored columns of a message, in the order the functions below read them
#: (after them: ``attempts, size``, and for dead letters ``reason, dead_lettered_at``).
COLUMNS = "id, destination, message_id, partition_key, properties, body, enqueued_at"

#: Where a message's session id is kept: in the JSON of its properties, under a name no
#: application property can have (a lone surrogate is refused by ``Message``, and JSON
#: escapes it as ``\udc00``), so files written before sessions existed read unchanged
#: and salvage copies it with the properties.
SESSION_KEY = "\udc00session_id"

_FIELDS = [f.name for f in fields(Message)]
_NO_PROPERTIES = Message(body=b"").properties  # the shared empty default
FAST = (
    _FIELDS == ["body", "message_id", "partition_key", "properties", "session_id"]
    and "__slots__" not in vars(Message)
    and [f.name for f in fields(StoredMessage)]
    == ["id", "destination", "message", "enqueued_at", "attempts", "size"]
)


def encode_properties(message: Message) -> str | None:
    """The ``properties`` column of ``message``: its properties and session id as JSON."""
    props = message.properties
    if message.session_id is not None:
        props = {**props, SESSION_KEY: message.session_id}
    return json.dumps(dict(props), separators=(",", ":")) if props else None


def split_properties(text: str | None) -> tuple[dict[str, Any], str | None]:
    """The properties and the session id held in a ``properties`` column."""
    props = json.loads(text) if text else {}
    session = props.pop(SESSION_KEY, None) if SESSION_KEY in props else None
    return props, session


def message_from_row(row: Sequence[Any]) -> Message:
    """A ``Message`` from ``message_id, partition_key, properties, body`` (not hot:
    dead letters and requeues go through the validating constructor)."""
    message_id, partition_key, properties, body = row
    props, session = split_properties(properties)
    return Message(
        body=body,
        message_id=message_id,
        partition_key=partition_key,
        properties=props,
        session_id=session,
    )


def stored_from_rows(rows: Iterable[Sequence[Any]]) -> list[StoredMessage]:
    """``StoredMessage`` records from rows of ``id, destination, message_id,
    partition_key, properties, body, enqueued_at, attempts, size``."""
    if not FAST:
        return [
            StoredMessage(
                id=r[0],
                destination=r[1],
                message=message_from_row(r[2:6]),
                enqueued_at=r[6],
                attempts=r[7],
                size=r[8],
            )
            for r in rows
        ]
    new, loads, proxy, empty = object.__new__, json.loads, MappingProxyType, _NO_PROPERTIES
    session_key = SESSION_KEY
    out = []
    # One flat loop with local names: this is the per-message cost of get_batch.
    # Item assignment into the fresh instance __dict__ is the cheapest way in.
    for row_id, destination, message_id, key, properties, body, at, attempts, size in rows:
        message = new(Message)
        fields_ = message.__dict__
        fields_["body"] = body
        fields_["message_id"] = message_id
        fields_["partition_key"] = key
        if not properties:
            fields_["properties"] = empty
            fields_["session_id"] = None
        else:
            props = loads(properties)
            fields_["session_id"] = props.pop(session_key, None) if session_key in props else None
            fields_["properties"] = proxy(props) if props else empty
        stored = new(StoredMessage)
        fields_ = stored.__dict__
        fields_["id"] = row_id
        fields_["destination"] = destination
        fields_["message"] = message
        fields_["enqueued_at"] = at
        fields_["attempts"] = attempts
        fields_["size"] = size
        out.append(stored)
    return out


def dead_from_row(row: Sequence[Any]) -> DeadLetteredMessage:
    """A ``DeadLetteredMessage`` from the stored columns plus ``reason, dead_lettered_at``."""
    return DeadLetteredMessage(
        id=row[0],
        destination=row[1],
        message=message_from_row(row[2:6]),
        enqueued_at=row[6],
        attempts=row[7],
        size=row[8],
        reason=row[9],
        dead_lettered_at=row[10],
    )
