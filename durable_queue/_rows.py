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

__all__ = ["COLUMNS", "FAST", "dead_from_row", "message_from_row", "stored_from_rows"]

#: The stored columns of a message, in the order the functions below read them
#: (after them: ``attempts, size``, and for dead letters ``reason, dead_lettered_at``).
COLUMNS = "id, destination, message_id, partition_key, properties, body, enqueued_at"

_FIELDS = [f.name for f in fields(Message)]
_NO_PROPERTIES = Message(body=b"").properties  # the shared empty default
FAST = (
    _FIELDS == ["body", "message_id", "partition_key", "properties"]
    and "__slots__" not in vars(Message)
    and [f.name for f in fields(StoredMessage)]
    == ["id", "destination", "message", "enqueued_at", "attempts", "size"]
)


def message_from_row(row: Sequence[Any]) -> Message:
    """A ``Message`` from ``message_id, partition_key, properties, body`` (not hot:
    dead letters and requeues go through the validating constructor)."""
    message_id, partition_key, properties, body = row
    return Message(
        body=body,
        message_id=message_id,
        partition_key=partition_key,
        properties=json.loads(properties) if properties else {},
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
    out = []
    # One flat loop with local names: this is the per-message cost of get_batch.
    # Item assignment into the fresh instance __dict__ is the cheapest way in.
    for row_id, destination, message_id, key, properties, body, at, attempts, size in rows:
        message = new(Message)
        fields_ = message.__dict__
        fields_["body"] = body
        fields_["message_id"] = message_id
        fields_["partition_key"] = key
        fields_["properties"] = proxy(loads(properties)) if properties else empty
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
