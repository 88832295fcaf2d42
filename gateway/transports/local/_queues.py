"""Queues of the local namespace: insert, claim what is due, expire, settle, dead-letter,
renew locks, peek, schedule and cancel.

Pure SQL over a connection that :class:`~._local_db.Database` has put in a
transaction. A queue message is a row of ``messages``; besides the gateway's
:class:`~replication.Message` it may carry what only AMQP clients see (a
:class:`Queued` message from the emulator): the encoded AMQP sections other than
the body (``sections``), a scheduled enqueue time (``visible_at``: not delivered
before it) and the end of its time to live (``expires_at``). A message whose time
to live is over is never delivered: a receive that meets it moves it to the
dead-letter sub-queue (reason ``TTLExpiredException``) when the queue dead-letters
on expiration, and deletes it otherwise, as Service Bus does. Messages in a
dead-letter sub-queue do not expire.

A message may belong to a session (``session_id``); a session-enabled queue hands
its messages out a session at a time (``_local_sessions``). A deferred message
(``deferred``) is set aside by its receiver: only a receive by its sequence number
gets it again, until it is completed or dead-lettered.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.transports.base import ReceivedMessage, ReceiveMode
from replication import Message, MessageRejected

__all__ = [
    "COLUMNS",
    "DEAD_LETTER_SUFFIX",
    "EXPIRED_REASON",
    "MAX_DELIVERY_REASON",
    "NUMBER",
    "Queued",
    "available",
    "cancel_scheduled",
    "claim",
    "dead_letter",
    "insert",
    "lock_lost",
    "not_held",
    "peek",
    "received",
    "renew_locks",
    "settle",
]

DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"

MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
EXPIRED_REASON = "TTLExpiredException"
EXPIRED_DESCRIPTION = "The message expired and was dead lettered."

_INSERT = (
    "INSERT INTO messages (entity, message_id, body, partition_key, properties, "
    "enqueued_time, sections, visible_at, expires_at, session_id, number) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: A message's sequence number in its entity. ``seq`` is the row's own id, unique in the
#: namespace; rows written before entities numbered their own messages have no
#: ``number`` and keep ``seq`` as theirs (``_local_db`` starts every entity's count
#: above them).
NUMBER = "COALESCE(number, seq)"
#: The columns :func:`received` reads, in its order (the last is the row's ``seq``).
COLUMNS = (f"{NUMBER}, message_id, body, partition_key, properties, enqueued_time, "
           "delivery_count, sections, expires_at, session_id, seq")
_ROW_ID = 10
_DUE = ("AND (locked_until IS NULL OR locked_until <= ?) "
        "AND (visible_at IS NULL OR visible_at <= ?) AND deferred = 0 ORDER BY seq LIMIT ?")
_AVAILABLE = f"SELECT {COLUMNS} FROM messages WHERE entity = ? {_DUE}"
_AVAILABLE_IN_SESSION = f"SELECT {COLUMNS} FROM messages WHERE entity = ? AND session_id = ? {_DUE}"


@dataclass(frozen=True, kw_only=True)
class Queued:
    """A queue message with what only AMQP clients see (the emulator sends these).

    ``sections`` is the encoded AMQP message without its body (header, message
    annotations, properties, application properties, footer); ``scheduled_time``
    (seconds since the epoch) holds the message back until then; ``time_to_live``
    (seconds) counts from its enqueue time (the scheduled time, when it has one).
    """

    message: Message
    sections: bytes | None = None
    scheduled_time: float | None = None
    time_to_live: float | None = None


def _props(message: Message) -> str | None:
    return json.dumps(dict(message.properties)) if message.properties else None


def _numbers(conn: sqlite3.Connection, entity: str, count: int) -> int:
    """Take ``count`` sequence numbers of ``entity``; the first. Each entity counts from 1,
    as Service Bus does (a subscription counts its own, see the README's emulator table)."""
    key = entity.lower()
    # An UPDATE and a SELECT cost a third of one upsert with RETURNING (a send's hot path).
    if not conn.execute("UPDATE sequences SET last = last + ? WHERE entity = ?",
                        (count, key)).rowcount:
        conn.execute("INSERT INTO sequences (entity, last) VALUES (?, 0)", (key,))
        conn.execute("UPDATE sequences SET last = ? WHERE entity = ?", (count, key))
    (last,) = conn.execute("SELECT last FROM sequences WHERE entity = ?", (key,)).fetchone()
    return int(last) - count + 1


def insert(conn: sqlite3.Connection, entity: str, items: Sequence[Message | Queued],
           now: float) -> list[int]:
    """Append messages to a queue; their sequence numbers."""
    seqs: list[int] = []
    number = _numbers(conn, entity, len(items)) if items else 0
    for item in items:
        q = item if isinstance(item, Queued) else Queued(message=item)
        m = q.message
        scheduled = q.scheduled_time if q.scheduled_time is not None and (
            q.scheduled_time > now) else None
        enqueued = now if scheduled is None else scheduled
        expires = None if q.time_to_live is None else enqueued + q.time_to_live
        conn.execute(_INSERT, (entity, m.message_id, m.body, m.partition_key, _props(m),
                               enqueued, q.sections, scheduled, expires, m.session_id, number))
        seqs.append(number)
        number += 1
    return seqs


def available(conn: sqlite3.Connection, entity: str, now: float, limit: int,
              session_id: str | None = None) -> list[Any]:
    """Up to ``limit`` rows of ``entity`` (of one session, when given) that are neither
    locked, deferred nor scheduled for later."""
    if session_id is not None:
        return conn.execute(_AVAILABLE_IN_SESSION,
                            (entity, session_id, now, now, limit)).fetchall()
    return conn.execute(_AVAILABLE, (entity, now, now, limit)).fetchall()


def expired(row: Sequence[Any], now: float) -> bool:
    """Whether the time to live of a row (of :data:`COLUMNS`) is over."""
    return row[8] is not None and row[8] <= now


def received(row: Sequence[Any], *, namespace: str, entity: str, lock_token: str | None,
             delivery_count: int, locked_until: float | None) -> tuple[ReceivedMessage,
                                                                      bytes | None]:
    """A row (of :data:`COLUMNS`) as a received message, and its AMQP sections."""
    seq, mid, body, key, props, enqueued, _, sections, _, session, _ = row
    message = Message(body=body, message_id=mid, partition_key=key,
                      properties=json.loads(props) if props else {}, session_id=session)
    return ReceivedMessage(
        message=message, namespace=namespace, entity=entity, lock_token=lock_token,
        sequence_number=seq, delivery_count=delivery_count, enqueued_time=enqueued,
        locked_until=locked_until), sections


def new_lock_token() -> str:
    return uuid.uuid4().hex


def cancel_scheduled(conn: sqlite3.Connection, entity: str, sequence_numbers: Sequence[int],
                     now: float) -> list[int]:
    """Delete messages of ``entity`` still waiting for their scheduled time, all or none.

    Returns:
        The sequence numbers that name no such message (enqueued already, or unknown);
        when there are any, nothing is deleted.
    """
    wanted = sorted(set(sequence_numbers))
    found = dict(conn.execute(
        f"SELECT {NUMBER}, seq FROM messages WHERE entity = ? AND visible_at > ? AND {NUMBER} "
        f"IN ({', '.join('?' * len(wanted))})", (entity, now, *wanted))) if wanted else {}
    missing = [seq for seq in wanted if seq not in found]
    if not missing:
        conn.executemany("DELETE FROM messages WHERE seq = ?", [(found[n],) for n in wanted])
    return missing


def dead_letter(conn: sqlite3.Connection, entity: str, rows: Sequence[tuple[int, str | None]],
                reason: str, description: str) -> None:
    """Move rows (row id, properties) of ``entity`` to its dead-letter sub-queue, where they
    keep their sequence numbers,
    adding ``DeadLetterReason`` and ``DeadLetterErrorDescription`` to their properties."""
    updates: list[tuple[Any, ...]] = []
    for seq, props in rows:
        merged = json.loads(props) if props else {}
        merged.update(DeadLetterReason=reason, DeadLetterErrorDescription=description)
        updates.append((entity + DEAD_LETTER_SUFFIX, json.dumps(merged), seq))
    conn.executemany(
        "UPDATE messages SET entity = ?, properties = ?, lock_token = NULL, "
        "locked_until = NULL, expires_at = NULL, deferred = 0 WHERE seq = ?",
        updates,
    )


def settle(conn: sqlite3.Connection, entity: str, lock_token: str, action: str, now: float, *,
           max_delivery_count: int, reason: str = "", description: str = "") -> bool:
    """Settle the delivery holding ``lock_token``; False when that lock is lost.

    ``action`` is ``complete``, ``abandon``, ``dead_letter`` (in a dead-letter
    sub-queue: an abandon), ``defer`` (set aside until received by its sequence
    number) or ``release`` (an abandon that does not count as a delivery: the message
    never reached an application). The abandon that uses up the last delivery
    dead-letters the message, as Service Bus does.
    """
    row = conn.execute(
        "SELECT seq, properties, delivery_count FROM messages "
        "WHERE lock_token = ? AND entity = ? AND locked_until > ?",
        (lock_token, entity, now),
    ).fetchone()
    if row is None:
        return False
    seq, props, count = row
    in_dlq = entity.endswith(DEAD_LETTER_SUFFIX)
    if action == "complete":
        conn.execute("DELETE FROM messages WHERE seq = ?", (seq,))
    elif action == "defer":
        conn.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL, deferred = 1 "
                     "WHERE seq = ?", (seq,))
    elif action == "dead_letter" and not in_dlq:
        dead_letter(conn, entity, [(seq, props)], reason, description)
    elif action == "abandon" and not in_dlq and count >= max_delivery_count:
        dead_letter(conn, entity, [(seq, props)], MAX_DELIVERY_REASON,
                    f"Message could not be consumed after {count} delivery attempts.")
    else:
        uncount = 1 if action == "release" and count > 0 else 0
        conn.execute("UPDATE messages SET lock_token = NULL, locked_until = NULL, "
                     "delivery_count = delivery_count - ? WHERE seq = ?", (uncount, seq))
    return True


def claim(conn: sqlite3.Connection, entity: str, *, namespace: str, max_messages: int,
          mode: ReceiveMode, now: float, lock_duration: float, max_delivery_count: int,
          dead_letter_expired: bool, session_id: str | None = None
          ) -> list[tuple[ReceivedMessage, bytes | None]]:
    """Claim up to ``max_messages`` available messages of a queue (or its dead-letter
    sub-queue; of one session when ``session_id`` is given), with their AMQP sections.

    On the way, a message whose time to live is over is expired, and one delivered
    ``max_delivery_count`` times already is dead-lettered (not in a sub-queue).
    Peek-lock locks what it returns until ``now + lock_duration``; receive-and-delete
    deletes it.
    """
    counts_deliveries = not entity.endswith(DEAD_LETTER_SUFFIX)
    peek = mode is ReceiveMode.PEEK_LOCK
    out: list[tuple[ReceivedMessage, bytes | None]] = []
    while len(out) < max_messages:
        rows = available(conn, entity, now, max_messages - len(out), session_id)
        if not rows:
            break
        exhausted: list[tuple[int, str | None]] = []
        expired_rows: list[tuple[int, str | None]] = []
        batch: list[tuple[ReceivedMessage, bytes | None]] = []
        row_ids: list[int] = []
        for row in rows:
            seq, props, count = row[_ROW_ID], row[4], row[6]
            if counts_deliveries and expired(row, now):
                expired_rows.append((seq, props))
            elif counts_deliveries and count >= max_delivery_count:
                exhausted.append((seq, props))
            else:
                batch.append(received(
                    row, namespace=namespace, entity=entity,
                    lock_token=new_lock_token() if peek else None,
                    delivery_count=count + 1,
                    locked_until=now + lock_duration if peek else None))
                row_ids.append(seq)
        dead_letter(
            conn, entity, exhausted, MAX_DELIVERY_REASON,
            f"Message could not be consumed after {max_delivery_count} delivery attempts.",
        )
        _expire(conn, entity, expired_rows, dead_letter_expired)
        claimed = [r for r, _ in batch]
        if peek:
            conn.executemany(
                "UPDATE messages SET delivery_count = ?, lock_token = ?, locked_until = ? "
                "WHERE seq = ?",
                [(r.delivery_count, r.lock_token, r.locked_until, row_id)
                 for r, row_id in zip(claimed, row_ids, strict=True)],
            )
        else:
            conn.executemany("DELETE FROM messages WHERE seq = ?", [(i,) for i in row_ids])
        out.extend(batch)
    return out


def _expire(conn: sqlite3.Connection, entity: str, rows: list[tuple[int, str | None]],
            dead_letter_expired: bool) -> None:
    if dead_letter_expired:
        dead_letter(conn, entity, rows, EXPIRED_REASON, EXPIRED_DESCRIPTION)
    else:
        conn.executemany("DELETE FROM messages WHERE seq = ?", [(seq,) for seq, _ in rows])


def renew_locks(conn: sqlite3.Connection, entity: str, lock_tokens: Sequence[str],
                until: float, now: float) -> list[float | None]:
    """Extend each lock that still holds to ``until``; None for a lost lock."""
    out: list[float | None] = []
    for token in lock_tokens:
        cur = conn.execute(
            "UPDATE messages SET locked_until = ? WHERE lock_token = ? AND entity = ? "
            "AND locked_until > ?", (until, token, entity, now))
        out.append(until if cur.rowcount else None)
    return out


def peek(conn: sqlite3.Connection, entity: str, *, namespace: str, from_sequence: int,
         max_messages: int, session_id: str | None = None
         ) -> list[tuple[ReceivedMessage, bytes | None]]:
    """Up to ``max_messages`` messages (of one session, when given) from
    ``from_sequence`` on (locked, scheduled, deferred or not), unchanged, with their AMQP
    sections."""
    where, args = ("AND session_id = ? ", (session_id,)) if session_id is not None else ("", ())
    # Within an entity, numbers grow with seq: ordering by seq keeps to the index.
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM messages WHERE entity = ? {where}AND {NUMBER} >= ? "
        "ORDER BY seq LIMIT ?", (entity, *args, from_sequence, max_messages)).fetchall()
    return [received(row, namespace=namespace, entity=entity,
                     lock_token=None, delivery_count=row[6], locked_until=None)
            for row in rows]


def not_held(received: ReceivedMessage, namespace: str) -> MessageRejected | None:
    """Why ``received`` cannot be settled in ``namespace`` (no lock held there), or None."""
    if received.lock_token is None or received.namespace != namespace:
        return MessageRejected(
            f"message {received.message_id} holds no lock in local://{namespace}: "
            "settle only messages received here in peek-lock mode"
        )
    return None


def lock_lost(received: ReceivedMessage) -> MessageRejected:
    """The refusal of a settlement whose lock expired or was settled already."""
    return MessageRejected(
        f"lock lost on message {received.message_id} of {received.entity!r}: it expired or "
        "the message was settled; it will be delivered again, do not retry"
    )
