"""Service Bus message sessions: the receiver link of a session-enabled queue.

A session receiver attaches with the ``com.microsoft:session-filter`` source filter:
a session id, or null for the next available session. The link is answered once the
session is locked, with the session id in the filter (the SDK reads it from there)
and the lock's expiry in the ``com.microsoft:locked-until-utc`` link property (.NET
ticks). A named session another receiver holds is refused at once with
``com.microsoft:session-cannot-be-locked``; for the next available session the attach
waits, up to the link's ``com.microsoft:timeout`` (milliseconds; 60 s without one),
for a session with a message, then is refused with ``com.microsoft:timeout`` (the SDK
raises ``OperationTimeoutError``). A filter that is not a string (``session_id=1``) is
refused with ``com.microsoft:argument-error`` (a ``ServiceBusError``). The link
delivers only that session's messages, oldest first, each locked as long as the
session; when the lock is lost (it expired and another receiver took the session) the
link is detached with
``com.microsoft:session-lock-lost``. Detaching the link gives the session up.

The lock is the connection's: the ``$management`` operations on a session
(``renew-session-lock``, ``get-session-state``, ``set-session-state``, and
``receive-by-sequence-number``, ``peek-message`` with a ``session-id``) find it in
:class:`SessionLocks` by connection, entity and session id.
"""

from __future__ import annotations

import contextlib
import time
import uuid

from gateway.amqp.server import (
    SESSION_FILTER,
    Link,
    NodeConnection,
    OutgoingLink,
    accept_session_link,
    asked_session,
    attach_timeout,
    session_filter,
    wait_first,
)
from gateway.emulator.amqp._interfaces import NodeNamespace
from gateway.emulator.amqp._servicebus import QueueReader
from gateway.transports.base import ReceivedMessage
from replication import GatewayError

__all__ = ["SESSION_FILTER", "SessionLocks", "SessionReader", "attach_session_reader",
           "session_filter"]

_TIMEOUT = "com.microsoft:timeout"
_CANNOT_LOCK = "com.microsoft:session-cannot-be-locked"
#: How long a next-available attach waits when the client gives no timeout.
_DEFAULT_WAIT = 60.0
#: How often a waiting attach looks again, besides when the queue changes.
_POLL = 0.25


class SessionLocks:
    """The session locks held by the receiver links of one namespace, by connection."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[int, str, str], str] = {}

    def add(self, connection: NodeConnection, entity: str, session_id: str, token: str) -> None:
        self._tokens[(id(connection), entity.lower(), session_id)] = token

    def remove(self, connection: NodeConnection, entity: str, session_id: str,
               token: str) -> None:
        key = (id(connection), entity.lower(), session_id)
        if self._tokens.get(key) == token:
            del self._tokens[key]

    def token(self, connection: NodeConnection, entity: str, session_id: str) -> str | None:
        """The lock token ``connection`` holds on the session, if any."""
        return self._tokens.get((id(connection), entity.lower(), session_id))


class SessionReader(QueueReader):
    """A receiver link on one locked session of a queue (see the module docstring)."""

    def __init__(self, namespace: NodeNamespace, entity: str, link: OutgoingLink, *,
                 session_id: str, token: str, locks: SessionLocks) -> None:
        self.session_id = session_id
        self.token = token
        self._locks = locks
        self._connection = link.session.connection
        locks.add(self._connection, entity, session_id, token)
        super().__init__(namespace, entity, link)

    async def claim(self, count: int) -> list[tuple[ReceivedMessage, bytes | None]]:
        ns = self.namespace
        return await ns.run(ns.store.sessions.receive, self.entity, self.session_id,
                            self.token, max_messages=count, mode=self.mode, now=time.time())

    def on_detach(self, link: Link) -> None:
        super().on_detach(link)
        self._locks.remove(self._connection, self.entity, self.session_id, self.token)
        ns = self.namespace
        ns.spawn(_release(ns, self.entity, self.session_id, self.token))


async def _release(namespace: NodeNamespace, entity: str, session_id: str, token: str) -> None:
    with contextlib.suppress(GatewayError):  # else the lock expires by itself
        await namespace.run(namespace.store.sessions.release, entity, session_id, token,
                            time.time())
    namespace.wrote([entity])  # its unsettled messages are free again


async def attach_session_reader(namespace: NodeNamespace, link: OutgoingLink, entity: str,
                                max_message_size: int, locks: SessionLocks) -> None:
    """Lock the session ``link`` asks for, then accept it; or refuse it (module docstring)."""
    asked, wanted = asked_session(link)
    if not asked:
        return
    token = uuid.uuid4().hex
    deadline = time.monotonic() + attach_timeout(link, _DEFAULT_WAIT)
    while True:
        changed = namespace.changed(entity)
        got = await namespace.run(namespace.store.sessions.accept, entity, wanted, token=token,
                                  now=time.time())
        if got is not None:
            break
        if wanted is not None:
            link.refuse(_CANNOT_LOCK, f"the session {wanted!r} of {entity!r} is locked by "
                        "another receiver")
            return
        left = deadline - time.monotonic()
        if left <= 0 or link.state != "attaching":
            link.refuse(_TIMEOUT, f"no session of {entity!r} has a message available: the "
                        "operation did not complete within the allocated time")
            return
        await wait_first([changed.wait()], min(left, _POLL))
    session_id, until = got
    if link.state != "attaching":  # the client gave up meanwhile
        await _release(namespace, entity, session_id, token)
        return
    properties = accept_session_link(link, session_id, until)
    reader = SessionReader(namespace, entity, link, session_id=session_id, token=token,
                           locks=locks)
    link.accept(reader, max_message_size=max_message_size, properties=properties)
