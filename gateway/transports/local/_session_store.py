"""The transactions of sessions and deferred messages in a local namespace file.

:class:`SessionStore` is the ``sessions`` part of :class:`~._local_store.Store`: it
shares its file and its catalogue, and runs :mod:`._local_sessions`' SQL in write
transactions, so a session is locked by one receiver at a time across processes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from gateway.transports.base import ReceivedMessage, ReceiveMode
from gateway.transports.local import _queues as queues
from gateway.transports.local import _sessions as sessions
from gateway.transports.local._db import Database
from gateway.transports.local._entities import Catalog, Entity
from replication import MessageRejected, SessionLockLost

__all__ = ["SessionStore"]

Sections = list[tuple[ReceivedMessage, bytes | None]]


class SessionStore:
    """Sessions of the session-enabled queues, and deferred messages, of one namespace file.

    Args:
        db: the namespace file.
        catalog: its entities.
        namespace: the namespace's name, put on records and errors.
    """

    def __init__(self, db: Database, catalog: Catalog, *, namespace: str) -> None:
        self.db = db
        self._catalog = catalog
        self.namespace = namespace

    def _session_queue(self, conn: sqlite3.Connection, entity: str) -> Entity:
        q = self._catalog.queue_of(conn, entity)
        if not q.requires_session or entity.endswith(queues.DEAD_LETTER_SUFFIX):
            raise MessageRejected(
                f"{entity!r} in local://{self.namespace} is not session-enabled: receive it "
                "without a session (create the queue with requires_session=True for sessions)")
        return q

    def _lost(self, entity: str, session_id: str) -> SessionLockLost:
        return SessionLockLost(
            f"the lock on session {session_id!r} of {entity!r} in local://{self.namespace} "
            "is lost (it expired or another receiver took the session): accept it again")

    def _held(self, conn: sqlite3.Connection, entity: str, session_id: str, token: str,
              now: float) -> float:
        until = sessions.holds(conn, entity, session_id, token, now)
        if until is None:
            raise self._lost(entity, session_id)
        return until

    def accept(self, entity: str, session_id: str | None, *, token: str,
               now: float) -> tuple[str, float] | None:
        """Lock ``session_id`` (``None``: the next available one) for ``token``.

        Returns:
            (session id, lock expiry), or ``None`` when that session is locked by
            another receiver, or no session has a message available.

        Raises:
            MessageRejected: no such queue, or it is not session-enabled.
        """
        def txn(conn: sqlite3.Connection) -> tuple[str, float] | None:
            q = self._session_queue(conn, entity)
            return sessions.accept(conn, entity, session_id, token=token, now=now,
                                   lock_duration=q.lock_duration)

        if session_id is None:
            # Look before taking the write lock: idle receivers do not compete with senders.
            def look(conn: sqlite3.Connection) -> bool:
                self._session_queue(conn, entity)
                return sessions.any_available(conn, entity, now)

            if not self.db.read(look):
                return None
        return self.db.write(txn)

    def receive(self, entity: str, session_id: str, token: str, *, max_messages: int,
                mode: ReceiveMode, now: float) -> Sections:
        """Claim up to ``max_messages`` of the session's available messages, oldest first.

        Raises:
            SessionLockLost: ``token`` no longer holds the session.
        """
        def look(conn: sqlite3.Connection) -> bool:
            self._held(conn, entity, session_id, token, now)
            return bool(queues.available(conn, entity, now, 1, session_id))

        if not self.db.read(look):
            return []

        def txn(conn: sqlite3.Connection) -> Sections:
            q = self._session_queue(conn, entity)
            until = self._held(conn, entity, session_id, token, now)
            return queues.claim(conn, entity, namespace=self.namespace,
                                max_messages=max_messages, mode=mode, now=now,
                                lock_duration=until - now,
                                max_delivery_count=q.max_delivery_count,
                                dead_letter_expired=q.dead_lettering_on_message_expiration,
                                session_id=session_id)
        return self.db.write(txn)

    def renew(self, entity: str, session_id: str, token: str, now: float) -> float:
        """Extend the session's lock by the queue's lock duration; the new expiry.

        Raises:
            SessionLockLost: ``token`` no longer holds the session.
        """
        def txn(conn: sqlite3.Connection) -> float:
            q = self._session_queue(conn, entity)
            until = sessions.renew(conn, entity, session_id, token, now=now,
                                   lock_duration=q.lock_duration)
            if until is None:
                raise self._lost(entity, session_id)
            return until
        return self.db.write(txn)

    def release(self, entity: str, session_id: str, token: str, now: float) -> None:
        """Give the session up; its unsettled messages are delivered again."""
        self.db.write(lambda conn: sessions.release(conn, entity, session_id, token, now))

    def get_state(self, entity: str, session_id: str, token: str, now: float) -> bytes | None:
        """The session's state (``None``: never set, or cleared).

        Raises:
            SessionLockLost: ``token`` no longer holds the session.
        """
        def txn(conn: sqlite3.Connection) -> bytes | None:
            self._held(conn, entity, session_id, token, now)
            return sessions.get_state(conn, entity, session_id)
        return self.db.read(txn)

    def set_state(self, entity: str, session_id: str, token: str, state: bytes | None,
                  now: float) -> None:
        """Replace the session's state (``None`` clears it).

        Raises:
            SessionLockLost: ``token`` no longer holds the session.
        """
        def txn(conn: sqlite3.Connection) -> None:
            self._held(conn, entity, session_id, token, now)
            sessions.set_state(conn, entity, session_id, state)
        self.db.write(txn)

    def receive_deferred(self, entity: str, sequence_numbers: Sequence[int], *,
                         mode: ReceiveMode, now: float,
                         session: tuple[str, str] | None = None) -> Sections:
        """Receive deferred messages by sequence number (all or none), in that order.

        ``session`` is (session id, lock token) on a session-enabled queue: only that
        session's deferred messages, locked as long as the session.

        Raises:
            MessageRejected: a number names no deferred message free to receive (the
                message says which); nothing was received.
            SessionLockLost: the token no longer holds the session.
        """
        def txn(conn: sqlite3.Connection) -> Sections:
            if session is not None:
                q = self._session_queue(conn, entity)
                until = self._held(conn, entity, session[0], session[1], now)
            else:
                q = self._catalog.queue_of(conn, entity)
                if q.requires_session and not entity.endswith(queues.DEAD_LETTER_SUFFIX):
                    raise MessageRejected(f"{entity!r} is session-enabled: receive its "
                                          "deferred messages through a session receiver")
                until = now + q.lock_duration
            found, missing = sessions.receive_deferred(
                conn, entity, sequence_numbers, namespace=self.namespace, mode=mode, now=now,
                locked_until=until, session_id=None if session is None else session[0])
            if missing:
                raise MessageRejected(
                    f"no deferred message with sequence number {', '.join(map(str, missing))} "
                    f"in {entity!r} to receive (unknown, not deferred, locked or of another "
                    "session): nothing was received")
            return found
        return self.db.write(txn)

    def peek(self, entity: str, session_id: str, *, from_sequence: int,
             max_messages: int) -> Sections:
        """Up to ``max_messages`` messages of one session from ``from_sequence`` on, unchanged."""
        def txn(conn: sqlite3.Connection) -> Sections:
            self._session_queue(conn, entity)
            return queues.peek(conn, entity, namespace=self.namespace,
                               from_sequence=from_sequence, max_messages=max_messages,
                               session_id=session_id)
        return self.db.read(txn)

    def deferred(self, entity: str, sequence_numbers: Sequence[int]) -> set[int]:
        """Which of ``sequence_numbers`` name deferred messages of ``entity`` (for a peek)."""
        wanted = list(dict.fromkeys(int(n) for n in sequence_numbers))
        if not wanted:
            return set()

        def txn(conn: sqlite3.Connection) -> set[int]:
            return {n for (n,) in conn.execute(
                f"SELECT {queues.NUMBER} FROM messages WHERE entity = ? AND deferred = 1 "
                f"AND {queues.NUMBER} IN ({', '.join('?' * len(wanted))})", (entity, *wanted))}
        return self.db.read(txn)
