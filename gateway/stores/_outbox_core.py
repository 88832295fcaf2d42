"""What the outbox stores share: the records, the seam the dispatcher drives, rows.

An *outbox* is a table in the application's own database. The application adds a
message to it in the transaction that also writes its business rows
(``outbox.add(conn, message)``), so the two commit together or not at all; a
dispatcher (:class:`gateway.OutboxDispatcher`) later sends the committed rows through
a geo sender and deletes each one once the send returned. Two stores implement the
seam: :class:`~gateway.stores.PostgresOutbox` (a fleet: any number of dispatchers on
any number of machines) and :class:`~gateway.stores.SqliteOutbox` (an application
whose database is a SQLite file).

The dispatcher works a *destination* (an entity) at a time: it lists the destinations
that hold rows, *claims* one (no other dispatcher sends it until the claim ends), sends
its oldest rows, and *finishes* the claim by deleting the rows sent (or *releases* it
untouched when the send failed). It reads a few batches at a time; while they are
being sent it *reads ahead* the next ones and deletes the ones before
(``finish(..., keep=True)``), so the store's round trips overlap the sends.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from replication import ConfigError, Message

__all__ = ["DeadRow", "DestinationStats", "MessageLike", "Outbox", "OutboxClaim", "OutboxRow",
           "OutboxStats", "check_entity_name", "claimed_rows", "message_columns"]

#: What ``outbox.add`` takes: a ``Message``, or a body (its MessageId is generated).
MessageLike = Message | bytes | str

_NO_PROPERTIES = Message(b"").properties  # the shared empty default

#: Where a row keeps its message's session id: in the JSON of its properties, under a
#: name no application property can have (a lone surrogate, which ``Message`` refuses;
#: JSON escapes it), as the durable queue keeps it: the tables need no new column, and
#: rows added before sessions existed read unchanged.
SESSION_KEY = "\udc00session_id"


@dataclass(frozen=True)
class OutboxRow:
    """One committed row: its place in the outbox (``seq``, increasing in the order the
    rows were added) and the message, MessageId included, fixed when it was added."""

    seq: int
    message: Message


#: Whether rows can be rebuilt without the checking constructors (``claimed_rows``): the
#: records have the fields it fills in, and no slots.
_FAST = ([f.name for f in fields(Message)] == ["body", "message_id", "partition_key",
                                               "properties", "session_id"]
         and [f.name for f in fields(OutboxRow)] == ["seq", "message"]
         and "__slots__" not in vars(Message) and "__slots__" not in vars(OutboxRow))


@dataclass(frozen=True)
class DeadRow:
    """A row the namespaces refused for good (e.g. too large): moved aside, with why."""

    seq: int
    reason: str


@dataclass(eq=False)
class OutboxClaim:
    """One destination claimed by one dispatcher: its oldest rows, in order.

    ``handle`` is the store's own (an open transaction, a lease); only the store that
    made the claim reads it.
    """

    entity: str
    rows: tuple[OutboxRow, ...]
    handle: Any = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class DestinationStats:
    """Rows waiting for one destination, and how old the oldest is (seconds)."""

    waiting: int
    oldest_age: float


@dataclass(frozen=True, kw_only=True)
class OutboxStats:
    """What an outbox holds now: rows waiting per destination, and dead rows."""

    destinations: dict[str, DestinationStats]
    dead: int

    @property
    def waiting(self) -> int:
        """Rows waiting, all destinations together."""
        return sum(d.waiting for d in self.destinations.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "waiting": self.waiting,
            "dead": self.dead,
            "destinations": {name: {"waiting": d.waiting, "oldest_age_seconds": d.oldest_age}
                             for name, d in sorted(self.destinations.items())},
        }


@runtime_checkable
class Outbox(Protocol):
    """The seam between the outbox stores and the dispatcher.

    The blocking methods are called from worker threads, several at once (one per
    destination a dispatcher sends concurrently); :meth:`wait` on the event loop.
    """

    #: Where the outbox is, for errors and logs (never a password).
    where: str

    def destinations(self, entities: Collection[str] | None = None) -> list[str]:
        """The destinations that hold rows (of ``entities`` only, when given)."""
        ...

    def claim(self, entity: str, limit: int, *, owner: str) -> OutboxClaim | None:
        """Claim ``entity`` and read its oldest ``limit`` rows; ``None`` when another
        dispatcher holds it or it holds no rows."""
        ...

    def read_ahead(self, claim: OutboxClaim, limit: int) -> OutboxClaim | None:
        """The next ``limit`` rows after ``claim``'s, under the same claim (``None``
        when there are none); called while ``claim``'s rows are being sent."""
        ...

    def finish(self, claim: OutboxClaim, sent: int, dead: Sequence[DeadRow] = (), *,
               keep: bool = False) -> None:
        """Delete the first ``sent`` rows of ``claim`` and move ``dead`` aside, durably;
        then end the claim, or with ``keep``, hold it for the rows read ahead."""
        ...

    def release(self, claim: OutboxClaim) -> None:
        """End ``claim`` without changing a row."""
        ...

    async def wait(self, seconds: float) -> bool:
        """Return True as soon as rows may have been added, False after ``seconds``
        seconds without a sign of them."""
        ...

    def stats(self) -> OutboxStats:
        """Rows waiting per destination, the oldest's age, and dead rows."""
        ...

    def close(self) -> None:
        """Close what the store opened."""
        ...


def check_entity_name(entity: object) -> str:
    """``entity`` if it names a destination, else a ``ConfigError`` saying what to give."""
    if not isinstance(entity, str) or not entity.strip() or len(entity) > 260:
        raise ConfigError(f"an outbox row needs a destination: give entity='a queue or event "
                          f"hub name' (to add or to the outbox), not {entity!r}")
    return entity


def message_columns(message: MessageLike) -> tuple[str, str | None, str | None, bytes]:
    """``(message_id, partition_key, properties JSON or None, body)`` of a message: the
    MessageId is fixed here (generated when the message has none)."""
    if not isinstance(message, Message):
        message = Message(message)
    props: dict[str, Any] | None = dict(message.properties) if message.properties else None
    if message.session_id is not None:
        props = {**(props or {}), SESSION_KEY: message.session_id}
    return (message.message_id, message.partition_key,
            json.dumps(props) if props else None, message.body)


def claimed_rows(rows: Iterable[Sequence[Any]]) -> tuple[OutboxRow, ...]:
    """``OutboxRow`` s from rows of ``seq, message_id, partition_key, properties, body``.

    The dispatcher's per-row cost: the messages were checked by ``Message`` when they
    were added, so they are rebuilt without checking again (as the durable queue
    rebuilds its own), unless ``Message`` changed shape (then through its constructor).
    """
    if not _FAST:
        return tuple(_checked_row(*row) for row in rows)
    new, loads, proxy, empty, session_key = (object.__new__, json.loads, MappingProxyType,
                                             _NO_PROPERTIES, SESSION_KEY)
    out = []
    for seq, mid, key, props, body in rows:
        message = new(Message)
        fields_ = message.__dict__
        fields_["body"] = body if type(body) is bytes else bytes(body)
        fields_["message_id"] = mid
        fields_["partition_key"] = key
        if props:
            loaded = loads(props)
            fields_["session_id"] = loaded.pop(session_key, None)
            fields_["properties"] = proxy(loaded) if loaded else empty
        else:
            fields_["session_id"] = None
            fields_["properties"] = empty
        row = new(OutboxRow)  # a frozen dataclass's __init__ sets each field the slow way
        row.__dict__.update(seq=seq, message=message)
        out.append(row)
    return tuple(out)


def _checked_row(seq: Any, mid: str, key: str | None, props: str | None,
                 body: Any) -> OutboxRow:
    loaded = json.loads(props) if props else {}
    session = loaded.pop(SESSION_KEY, None)
    return OutboxRow(int(seq), Message(bytes(body), message_id=mid, partition_key=key,
                                       properties=loaded or None, session_id=session))
