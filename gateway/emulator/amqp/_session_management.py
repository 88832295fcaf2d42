"""The ``$management`` operations of sessions and deferred messages on a Service Bus queue.

``renew-session-lock``, ``get-session-state`` and ``set-session-state`` act on a
session whose lock the requesting connection holds (its session receiver link):
otherwise, or once the lock is lost, they answer 410 ``com.microsoft:session-lock-lost``.
``receive-by-sequence-number`` receives deferred messages (peek-locked, or deleted in
receive-and-delete mode), all or none: a number that names no deferred message free to
receive answers 404 ``com.microsoft:message-not-found``. With a ``session-id`` it takes
that session's deferred messages, through the connection's lock on it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from gateway.amqp import Timestamp
from gateway.amqp.server import DEFERRED, Reply, listed, queue_payload, status
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.transports.base import ReceiveMode
from replication import MessageRejected, SessionLockLost

__all__ = ["SESSION_OPERATIONS", "SessionLookup", "manage_session"]

#: A session id → the lock token the requesting connection holds on it (None: none).
SessionLookup = Callable[[str], "str | None"]

_RENEW = "com.microsoft:renew-session-lock"
_GET_STATE = "com.microsoft:get-session-state"
_SET_STATE = "com.microsoft:set-session-state"
_BY_SEQUENCE = "com.microsoft:receive-by-sequence-number"
SESSION_OPERATIONS = frozenset((_RENEW, _GET_STATE, _SET_STATE, _BY_SEQUENCE))
_LOST = "com.microsoft:session-lock-lost"
_NOT_FOUND = "com.microsoft:message-not-found"
#: receiver-settle-mode of receive-by-sequence-number: 0 (first) is receive-and-delete.
_RECEIVE_AND_DELETE = 0


def _lost(session_id: str) -> Reply:
    return Reply(properties=status(
        410, f"the lock on session {session_id!r} is lost: it expired, another receiver took "
        "the session, or this connection does not hold it", _LOST))


async def manage_session(namespace: NodeNamespace, entity: str, operation: str,
                         args: dict[str, Any], lookup: SessionLookup | None) -> Reply:
    """One of :data:`SESSION_OPERATIONS` on ``entity`` (see the module docstring)."""
    raw = args.get("session-id")
    session_id = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else (
        None if raw is None else str(raw))
    token = lookup(session_id) if lookup is not None and session_id is not None else None
    if operation == _BY_SEQUENCE:
        if session_id is not None and token is None:
            return _lost(session_id)
        return await _by_sequence(namespace, entity, args,
                                  None if session_id is None or token is None
                                  else (session_id, token))
    if session_id is None:
        return Reply(properties=status(400, f"{operation} needs a 'session-id'",
                                       "com.microsoft:argument-error"))
    if token is None:
        return _lost(session_id)
    store, now = namespace.store.sessions, time.time()
    try:
        if operation == _RENEW:
            until = await namespace.run(store.renew, entity, session_id, token, now)
            return Reply(properties=status(200, "OK"),
                         value={"expiration": Timestamp(round(until * 1000))})
        if operation == _GET_STATE:
            state = await namespace.run(store.get_state, entity, session_id, token, now)
            return Reply(properties=status(200, "OK"), value={"session-state": state})
        value = args.get("session-state")
        state = None if value is None else bytes(value)
        await namespace.run(store.set_state, entity, session_id, token, state, now)
        return Reply(properties=status(200, "OK"), value={})
    except SessionLockLost:
        return _lost(session_id)


async def _by_sequence(namespace: NodeNamespace, entity: str, args: dict[str, Any],
                       session: tuple[str, str] | None) -> Reply:
    seqs = [int(s) for s in listed(args.get("sequence-numbers"))]
    mode = (ReceiveMode.RECEIVE_AND_DELETE if args.get("receiver-settle-mode") ==
            _RECEIVE_AND_DELETE else ReceiveMode.PEEK_LOCK)
    try:
        got = await namespace.run(namespace.store.sessions.receive_deferred, entity, seqs,
                                  mode=mode, now=time.time(), session=session)
    except SessionLockLost:
        assert session is not None
        return _lost(session[0])
    except MessageRejected as exc:
        return Reply(properties=status(404, str(exc), _NOT_FOUND))
    messages = []
    for r, sections in got:
        item: dict[str, Any] = {"message": queue_payload(r, sections=sections, state=DEFERRED)}
        if r.lock_token is not None:
            item["lock-token"] = uuid.UUID(hex=r.lock_token)
        messages.append(item)
    return Reply(properties=status(200, "OK"), value={"messages": messages})
