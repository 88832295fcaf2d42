"""The outbox in a SQLite file: for an application whose own database is that file.

The outbox tables live beside the application's tables, in its file, so that
``add(conn, message)`` on the application's connection joins its transaction::

    geogateway_outbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, entity, message_id,
                      partition_key, properties, body, added_at)   indexed by (entity, seq)
    geogateway_outbox_leases(entity PRIMARY KEY, owner, expires)    one row per destination
    geogateway_outbox_dead(seq PRIMARY KEY, ..., failed_at, reason) rows refused for good

They are created when missing (the file is the application's: other tables in it are
expected). A new file is created with mode 0600 and in WAL mode; an existing one is
made 0600 (it holds messages) and keeps its journal mode.

**Claiming.** A destination's lease row is taken (``owner``, ``expires``) in one
``BEGIN IMMEDIATE`` transaction together with reading its oldest rows, renewed with
each batch's delete, and given back with the last one. A dispatcher killed mid-send
holds its destination until the lease expires (``lease`` seconds), then another takes
it and sends those rows again, with the same MessageIds. A send that outlasts the lease
may overlap the next holder's (a warning says so): keep ``lease`` above the longest send.

**Waking.** SQLite cannot notify; a waiting dispatcher reads ``PRAGMA data_version``
(which changes when another connection commits to the file) every 25 ms.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import anyio
import anyio.to_thread

from durable_queue import busy_retrying, is_busy, transaction
from gateway.stores._outbox_core import (
    DeadRow,
    DestinationStats,
    MessageLike,
    OutboxClaim,
    OutboxStats,
    check_entity_name,
    claimed_rows,
    message_columns,
)
from replication import ConfigError, GatewayError, StoreUnavailable

__all__ = ["SqliteOutbox"]

logger = logging.getLogger("geogateway")

T = TypeVar("T")

_TABLE = "geogateway_outbox"
_SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {_TABLE} (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        entity TEXT NOT NULL,
        message_id TEXT NOT NULL,
        partition_key TEXT,
        properties TEXT,
        body BLOB NOT NULL,
        added_at REAL NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_by_entity ON {_TABLE} (entity, seq)",
    f"""CREATE TABLE IF NOT EXISTS {_TABLE}_leases (
        entity TEXT PRIMARY KEY,
        owner TEXT NOT NULL DEFAULT '',
        expires REAL NOT NULL DEFAULT 0) WITHOUT ROWID""",
    # Every destination gets its lease row as its first row is added, in the same
    # transaction, without a second statement from the application.
    f"""CREATE TRIGGER IF NOT EXISTS {_TABLE}_destination AFTER INSERT ON {_TABLE}
        BEGIN INSERT OR IGNORE INTO {_TABLE}_leases (entity) VALUES (NEW.entity); END""",
    f"""CREATE TABLE IF NOT EXISTS {_TABLE}_dead (
        seq INTEGER PRIMARY KEY,
        entity TEXT NOT NULL,
        message_id TEXT NOT NULL,
        partition_key TEXT,
        properties TEXT,
        body BLOB NOT NULL,
        added_at REAL NOT NULL,
        failed_at REAL NOT NULL,
        reason TEXT NOT NULL)""",
]
_COLUMNS = "entity, message_id, partition_key, properties, body, added_at"
_INSERT = f"INSERT INTO {_TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
_WAKE_POLL = 0.025


class SqliteOutbox:
    """The send-side outbox in the application's SQLite file; see the module docstring.

    Args:
        path: the application's database file (created, 0600, when missing).
        entity: the destination of rows added without one.
        lease: seconds a dispatcher holds a destination it claimed, at most (a killed
            dispatcher's destinations are taken over after this).
        busy_timeout: seconds one statement waits for another connection's lock.
        lock_timeout: seconds a transaction is retried while the file stays locked.
        clock: the wall clock (tests pass a fake one).

    Raises:
        ConfigError: a bad option, or the file cannot be opened or is not a database.
    """

    #: Seconds a dispatcher waits at most between looks for new rows.
    poll_interval = 0.5

    def __init__(self, path: str | os.PathLike[str], *, entity: str | None = None,
                 lease: float = 30.0, busy_timeout: float = 5.0, lock_timeout: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        if not lease > 0 or not busy_timeout > 0 or not lock_timeout > 0:
            raise ConfigError("lease, busy_timeout and lock_timeout must be > 0")
        self.entity = None if entity is None else check_entity_name(entity)
        self.path = os.fspath(path)
        self.where = self.path
        self.lease = lease
        self._clock = clock
        self._lock = threading.Lock()
        self._retrying = busy_retrying(lock_timeout)
        self._conn = self._open(busy_timeout)
        self._version: int | None = None

    def __repr__(self) -> str:
        return f"SqliteOutbox({self.path!r})"

    def _open(self, busy_timeout: float) -> sqlite3.Connection:
        try:
            new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
            # Created (or narrowed to) 0600 before SQLite opens it: it holds messages.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            os.chmod(self.path, 0o600)
            conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None,
                                   check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the outbox file {self.path}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None
        try:
            if new:
                conn.execute("PRAGMA journal_mode=WAL")
            # This connection's commits (leases, deletes) need not reach the disk before
            # they return: one lost to a power cut only sends its rows again.
            conn.execute("PRAGMA synchronous=NORMAL")
            # Its deletes free the pages of sent rows without zeroing them first (builds
            # that default to secure_delete spend a third of a delete on that): the file
            # is 0600, and new rows reuse those pages.
            conn.execute("PRAGMA secure_delete=OFF")
            self._retrying(transaction, conn, _create)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if is_busy(exc):
                raise StoreUnavailable(f"outbox file {self.path} stayed locked: {exc}") from None
            raise ConfigError(f"the outbox file {self.path} is not a usable SQLite database "
                              f"({exc}): check the path") from None
        return conn

    # -- adding, in the application's transaction -------------------------------------

    def add(self, conn: sqlite3.Connection, message: MessageLike, *,
            entity: str | None = None) -> str:
        """Add ``message`` for ``entity`` in the transaction open on ``conn``.

        Its MessageId is fixed now (generated when the message has none) and returned.
        The row exists once that transaction commits; a rollback removes it, and it is
        never sent. (A connection in autocommit mode with no transaction open commits
        the row at once.)

        Args:
            conn: the application's ``sqlite3.Connection`` to this outbox's file.
            message: a ``Message``, or a body (``bytes``/``str``).
            entity: the destination (default: the outbox's ``entity``).

        Raises:
            ConfigError: no destination, or ``conn`` is not on a file with the outbox.
            sqlite3.Error: the application's transaction failed (as its own
                statements would).
        """
        return self.add_many(conn, [message], entity=entity)[0]

    def add_many(self, conn: sqlite3.Connection, messages: Sequence[MessageLike], *,
                 entity: str | None = None) -> list[str]:
        """Add ``messages``, in order; see :meth:`add`. Returns their MessageIds."""
        target = check_entity_name(entity if entity is not None else self.entity)
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError("SqliteOutbox.add takes the application's sqlite3.Connection, "
                            f"not {type(conn).__name__}")
        now = self._clock()
        rows = [(target, *message_columns(m), now) for m in messages]
        try:
            conn.executemany(_INSERT, rows)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise ConfigError(f"this connection's database has no outbox table: add "
                                  f"through a connection to {self.path}") from exc
            raise
        return [row[1] for row in rows]

    # -- the dispatcher's side --------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if is_busy(exc):
                raise StoreUnavailable(f"outbox file {self.path} stayed locked by another "
                                       f"process: {exc}") from exc
            raise GatewayError(f"outbox file {self.path}: {exc}") from exc

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._errors(), self._lock:
            result: T = self._retrying(transaction, self._conn, work)
            return result

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._errors(), self._lock:
            result: T = self._retrying(work, self._conn)
            return result

    def destinations(self, entities: Collection[str] | None = None) -> list[str]:
        """The destinations that hold rows (of ``entities`` only, when given)."""

        def read(conn: sqlite3.Connection) -> list[str]:
            # What wait() compares with: a commit after this look wakes it.
            self._version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            return [str(row[0]) for row in conn.execute(
                f"SELECT l.entity FROM {_TABLE}_leases l WHERE EXISTS "
                f"(SELECT 1 FROM {_TABLE} o WHERE o.entity = l.entity)")]

        found = self._read(read)
        return found if entities is None else [e for e in found if e in entities]

    def claim(self, entity: str, limit: int, *, owner: str) -> OutboxClaim | None:
        """Take ``entity``'s lease and read its oldest ``limit`` rows; ``None`` when
        another dispatcher's lease runs or it is empty."""

        def work(conn: sqlite3.Connection) -> OutboxClaim | None:
            now = self._clock()
            taken = conn.execute(
                f"UPDATE {_TABLE}_leases SET owner = ?, expires = ? WHERE entity = ? AND "
                f"(owner = '' OR expires < ?)", (token, now + self.lease, entity, now)).rowcount
            if not taken:
                return None
            claim = self._rows_after(conn, entity, -1, limit, token)
            if claim is None:
                _give_back(conn, entity, token)
            return claim

        # Each claim its own token: a later claim of this dispatcher never mistakes an
        # earlier one's lease for its own.
        token = f"{owner}/{uuid.uuid4().hex[:8]}"
        return self._write(work)

    def read_ahead(self, claim: OutboxClaim, limit: int) -> OutboxClaim | None:
        """The next ``limit`` rows after ``claim``'s, under the same lease."""
        return self._read(lambda conn: self._rows_after(
            conn, claim.entity, claim.rows[-1].seq, limit, str(claim.handle)))

    def _rows_after(self, conn: sqlite3.Connection, entity: str, after: int, limit: int,
                    token: str) -> OutboxClaim | None:
        rows = conn.execute(
            f"SELECT seq, message_id, partition_key, properties, body FROM {_TABLE} "
            f"WHERE entity = ? AND seq > ? ORDER BY seq LIMIT ?", (entity, after, limit))
        claimed = claimed_rows(rows)
        return OutboxClaim(entity, claimed, handle=token) if claimed else None

    def finish(self, claim: OutboxClaim, sent: int, dead: Sequence[DeadRow] = (), *,
               keep: bool = False) -> None:
        """Delete the first ``sent`` rows, move ``dead`` aside; give the lease back, or
        with ``keep`` renew it (one transaction)."""
        token = str(claim.handle)

        def work(conn: sqlite3.Connection) -> bool:
            now = self._clock()
            for d in dead:
                conn.execute(
                    f"INSERT OR IGNORE INTO {_TABLE}_dead (seq, {_COLUMNS}, failed_at, reason) "
                    f"SELECT seq, {_COLUMNS}, ?, ? FROM {_TABLE} WHERE seq = ?",
                    (now, d.reason, d.seq))
                conn.execute(f"DELETE FROM {_TABLE} WHERE seq = ?", (d.seq,))
            if sent:
                # The claim's rows are all of its destination's from the first to the
                # last: SQLite's writers take turns, so no row of a lower seq can have
                # been committed after them.
                conn.execute(f"DELETE FROM {_TABLE} WHERE entity = ? AND seq BETWEEN ? AND ?",
                             (claim.entity, claim.rows[0].seq, claim.rows[sent - 1].seq))
            if keep:
                held = conn.execute(
                    f"UPDATE {_TABLE}_leases SET expires = ? WHERE entity = ? AND owner = ?",
                    (now + self.lease, claim.entity, token)).rowcount
            else:
                held = _give_back(conn, claim.entity, token)
            return bool(held)

        if not self._write(work):
            logger.warning(
                "outbox %s: the lease on %s ran out during a send (longer than %g s); "
                "another dispatcher may have sent its rows meanwhile, out of order",
                self.path, claim.entity, self.lease)

    def release(self, claim: OutboxClaim) -> None:
        """Give the lease back without changing a row."""
        self._write(lambda conn: _give_back(conn, claim.entity, str(claim.handle)))

    async def wait(self, seconds: float) -> bool:
        """True once another connection committed to the file (since the last look at
        the destinations), False after ``seconds`` seconds."""
        deadline = time.monotonic() + seconds
        while True:
            version = await anyio.to_thread.run_sync(self._data_version)
            if self._version is not None and version != self._version:
                self._version = version
                return True
            self._version = version
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await anyio.sleep(min(_WAKE_POLL, left))

    def _data_version(self) -> int:
        return int(self._read(lambda conn: conn.execute("PRAGMA data_version").fetchone()[0]))

    def stats(self) -> OutboxStats:
        """Rows waiting per destination, the oldest's age, and dead rows."""

        def read(conn: sqlite3.Connection) -> OutboxStats:
            now = self._clock()
            rows = conn.execute(
                f"SELECT entity, count(*), min(added_at) FROM {_TABLE} GROUP BY entity")
            destinations = {str(e): DestinationStats(waiting=int(n),
                                                     oldest_age=max(0.0, now - float(oldest)))
                            for e, n, oldest in rows}
            dead = conn.execute(f"SELECT count(*) FROM {_TABLE}_dead").fetchone()[0]
            return OutboxStats(destinations=destinations, dead=int(dead))

        return self._read(read)

    def close(self) -> None:
        """Close the store's own connection (the application's are its own)."""
        with self._lock:
            self._conn.close()


def _create(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


def _give_back(conn: sqlite3.Connection, entity: str, token: str) -> int:
    """Give the lease back; 1 when ``token`` still held it, 0 when it had run out."""
    return conn.execute(f"UPDATE {_TABLE}_leases SET owner = '', expires = 0 WHERE entity = ?"
                        f" AND owner = ?", (entity, token)).rowcount
