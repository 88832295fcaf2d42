"""The ``$management`` node of a Service Bus queue: locks, peek, settle, schedule.

Emulated: ``renew-lock``, ``peek-message`` (scheduled and deferred messages too, as
on Azure; one session's with a ``session-id``), ``update-disposition`` (complete,
abandon, dead-letter, defer by lock token), ``schedule-message`` (the messages wait
in the queue until their time; the reply holds their sequence numbers) and
``cancel-scheduled-message`` (all or none; a sequence number that names no waiting
message is ``message-not-found``); the sessions' operations and
``receive-by-sequence-number`` are in ``_session_management``. Every other operation
is refused with ``amqp:not-implemented`` and a description the SDKs show.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway.amqp import AmqpMessage, Array, DecodeError, Long, Timestamp
from gateway.amqp.server import (
    DEFERRED,
    SCHEDULED_STATE,
    Reply,
    app_property,
    listed,
    queue_payload,
    status,
    tag_token,
    to_queued,
)
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.emulator.amqp._session_management import (
    SESSION_OPERATIONS,
    SessionLookup,
    manage_session,
)

if TYPE_CHECKING:
    from gateway.transports import Queued

__all__ = ["LOCK_LOST", "manage_queue"]

LOCK_LOST = "com.microsoft:message-lock-lost"
NOT_FOUND = "com.microsoft:message-not-found"
NOT_IMPLEMENTED = "amqp:not-implemented"

_DISPOSITIONS = {"completed": "complete", "abandoned": "abandon", "suspended": "dead_letter",
                 "defered": "defer"}


async def manage_queue(namespace: NodeNamespace, entity: str, request: AmqpMessage, *,
                       max_message_size: int | None = None,
                       sessions: SessionLookup | None = None) -> Reply:
    """One Service Bus management operation on ``entity`` (a queue or its DLQ).

    ``max_message_size`` bounds each message of a ``schedule-message`` request;
    ``sessions`` finds the requesting connection's lock on a session.
    """
    operation = str(app_property(request, "operation"))
    body = request.value if isinstance(request.value, dict) else {}
    args = {str(k): v for k, v in body.items()}
    if operation == "com.microsoft:renew-lock":
        return await _renew(namespace, entity, args)
    if operation == "com.microsoft:peek-message":
        return await _peek(namespace, entity, args)
    if operation == "com.microsoft:update-disposition":
        return await _dispose(namespace, entity, args)
    if operation == "com.microsoft:schedule-message":
        return await _schedule(namespace, entity, args, max_message_size)
    if operation == "com.microsoft:cancel-scheduled-message":
        return await _cancel(namespace, entity, args)
    if operation in SESSION_OPERATIONS:
        return await manage_session(namespace, entity, operation, args, sessions)
    return Reply(properties=status(501, f"operation {operation!r} is not emulated by the "
                                   "geogateway emulator", NOT_IMPLEMENTED))


async def _renew(namespace: NodeNamespace, entity: str, args: dict[str, Any]) -> Reply:
    tokens = [tag_token(t) for t in listed(args.get("lock-tokens"))]
    until = await namespace.run(namespace.store.renew_locks, entity, tokens, time.time())
    if any(u is None for u in until):
        return Reply(properties=status(410, "the lock on the message was lost", LOCK_LOST))
    stamps = tuple(Timestamp(round(u * 1000)) for u in until if u is not None)
    return Reply(properties=status(200, "OK"), value={"expirations": Array(stamps, "timestamp")})


async def _peek(namespace: NodeNamespace, entity: str, args: dict[str, Any]) -> Reply:
    start = int(args.get("from-sequence-number") or 0)
    count = max(1, int(args.get("message-count") or 1))
    session = args.get("session-id")
    if session is not None:
        peeked = await namespace.run(namespace.store.sessions.peek, entity, str(session),
                                     from_sequence=start, max_messages=count)
    else:
        peeked = await namespace.run(namespace.store.peek_sections, entity,
                                     from_sequence=start, max_messages=count)
    if not peeked:
        return Reply(properties=status(204, "No messages"))
    now = time.time()
    deferred = await namespace.run(namespace.store.sessions.deferred, entity,
                                   [r.sequence_number for r, _ in peeked])
    # A scheduled message is enqueued at its scheduled time: until then it is "scheduled".
    messages = [{"message": queue_payload(r, sections=sections, state=(
        DEFERRED if r.sequence_number in deferred else
        SCHEDULED_STATE if r.enqueued_time > now else None))} for r, sections in peeked]
    return Reply(properties=status(200, "OK"), value={"messages": messages})


async def _dispose(namespace: NodeNamespace, entity: str, args: dict[str, Any]) -> Reply:
    disposition = str(args.get("disposition-status"))
    action = _DISPOSITIONS.get(disposition)
    if action is None:
        return Reply(properties=status(501, f"the disposition {disposition!r} is not "
                                       "emulated by the geogateway emulator", NOT_IMPLEMENTED))
    items = [(tag_token(t), action, str(args.get("deadletter-reason") or ""),
              str(args.get("deadletter-description") or ""))
             for t in listed(args.get("lock-tokens"))]
    results = await namespace.run(namespace.store.settle_tokens, entity, items, time.time())
    namespace.wrote([entity])
    if not all(results):
        return Reply(properties=status(410, "the lock on the message was lost", LOCK_LOST))
    return Reply(properties=status(200, "OK"), value={})


async def _schedule(namespace: NodeNamespace, entity: str, args: dict[str, Any],
                    max_message_size: int | None) -> Reply:
    queued: list[Queued] = []
    for item in listed(args.get("messages")):
        encoded = {str(k): v for k, v in item.items()}.get("message") if isinstance(
            item, dict) else None
        if not isinstance(encoded, bytes):
            return Reply(properties=status(400, "schedule-message: each item needs the "
                                           "encoded 'message'", "com.microsoft:argument-error"))
        if max_message_size is not None and len(encoded) > max_message_size:
            return Reply(properties=status(
                413, f"the message is {len(encoded)} bytes, over the {max_message_size}-byte "
                f"limit of {entity!r}", "amqp:link:message-size-exceeded"))
        try:
            queued.append(to_queued(encoded))
        except (DecodeError, TypeError, ValueError) as exc:
            return Reply(properties=status(400, f"bad message: {exc}", "amqp:decode-error"))
    seqs = await namespace.run(namespace.store.schedule, entity, queued, time.time())
    namespace.wrote([entity])
    return Reply(properties=status(200, "OK"),
                 value={"sequence-numbers": Array(tuple(Long(s) for s in seqs), "long")})


async def _cancel(namespace: NodeNamespace, entity: str, args: dict[str, Any]) -> Reply:
    seqs = [int(s) for s in listed(args.get("sequence-numbers"))]
    missing = await namespace.run(namespace.store.cancel_scheduled, entity, seqs, time.time())
    if missing:
        return Reply(properties=status(
            404, f"no scheduled message with sequence number {', '.join(map(str, missing))} "
            f"in {entity!r}: it was enqueued or cancelled already; nothing was cancelled",
            NOT_FOUND))
    namespace.wrote([entity])
    return Reply(properties=status(200, "OK"), value={})
