"""The SQLite file of a local namespace: opening, schema, transactions, error mapping.

Several processes share one namespace file, so:

* the file is in WAL mode (readers never block the one writer) with
  ``synchronous=NORMAL``: a power cut may lose the last transactions but never
  corrupts the file. The namespace stands in for a remote broker in tests and
  drills, so that trade of durability for speed is the right one here;
* every write runs in ``BEGIN IMMEDIATE``, which takes the write lock up front, so
  a transaction never fails half-way on a lock upgrade; SQLITE_BUSY is retried
  (SQLite's busy handler first, then a loop of our own up to ``busy_deadline``)
  and is never shown to a caller as "database is locked";
* every sqlite3 error is mapped onto the error tree: a corrupt file or an I/O
  error is an outage of the namespace (:class:`NamespaceUnavailable`); a file that
  cannot be opened, or of a newer schema, makes it unusable until someone fixes it
  (:class:`NamespaceMisconfigured`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from durable_queue import busy_retrying, is_busy, transaction
from replication import GatewayError, NamespaceMisconfigured, NamespaceUnavailable

__all__ = ["Database"]

T = TypeVar("T")

# 2: owner_leases; 3: entity_options, seen_ids (topics, subscriptions); 4: sessions,
# deferral; 5: sequence numbers per entity. Every statement below is idempotent, so a
# file of any older version is brought up through all of them at once.
SCHEMA_VERSION = 5

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS entities (
        name TEXT PRIMARY KEY, kind TEXT NOT NULL, partitions INTEGER NOT NULL,
        lock_duration REAL NOT NULL, max_delivery_count INTEGER NOT NULL,
        max_message_size INTEGER NOT NULL,
        dead_lettering_on_message_expiration INTEGER NOT NULL DEFAULT 0,
        requires_session INTEGER NOT NULL DEFAULT 0)""",
    # One table for every queue and dead-letter sub-queue: dead-lettering is an
    # UPDATE of ``entity``; ``seq`` (never reused) is a row's id, ``number`` its sequence
    # number in its entity (``_local_queues``).
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, entity TEXT NOT NULL,
        message_id TEXT NOT NULL, body BLOB NOT NULL, partition_key TEXT,
        properties TEXT, enqueued_time REAL NOT NULL,
        delivery_count INTEGER NOT NULL DEFAULT 0, lock_token TEXT, locked_until REAL,
        sections BLOB, visible_at REAL, expires_at REAL, session_id TEXT,
        deferred INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS messages_by_entity ON messages (entity, seq)",
    "CREATE UNIQUE INDEX IF NOT EXISTS messages_by_lock ON messages (lock_token)",
    """CREATE TABLE IF NOT EXISTS partitions (
        entity TEXT NOT NULL, partition INTEGER NOT NULL, next_seq INTEGER NOT NULL,
        next_offset INTEGER NOT NULL, PRIMARY KEY (entity, partition))""",
    """CREATE TABLE IF NOT EXISTS events (
        entity TEXT NOT NULL, partition INTEGER NOT NULL, seq INTEGER NOT NULL,
        "offset" INTEGER NOT NULL, message_id TEXT NOT NULL, body BLOB NOT NULL,
        partition_key TEXT, properties TEXT, enqueued_time REAL NOT NULL,
        PRIMARY KEY (entity, partition, seq))""",
    'CREATE INDEX IF NOT EXISTS events_by_offset ON events (entity, partition, "offset")',
    """CREATE TABLE IF NOT EXISTS readers (
        entity TEXT NOT NULL, consumer_group TEXT NOT NULL, partition INTEGER NOT NULL,
        owner_level INTEGER NOT NULL, PRIMARY KEY (entity, consumer_group, partition))""",
    # Owner levels held by open readers (the readers table above is no longer used).
    """CREATE TABLE IF NOT EXISTS owner_leases (
        entity TEXT NOT NULL, consumer_group TEXT NOT NULL, partition INTEGER NOT NULL,
        owner_level INTEGER NOT NULL, reader TEXT NOT NULL, host TEXT NOT NULL,
        pid INTEGER NOT NULL, expires REAL NOT NULL,
        PRIMARY KEY (entity, consumer_group, partition))""",
    # What a queue, topic or subscription has beyond its entities row (_local_topics).
    """CREATE TABLE IF NOT EXISTS entity_options (
        entity TEXT PRIMARY KEY, topic TEXT, rules TEXT, forward_to TEXT, default_ttl REAL,
        duplicate_window REAL)""",
    "CREATE INDEX IF NOT EXISTS entity_options_by_topic ON entity_options (topic)",
    # The MessageIds taken by entities that detect duplicates (_local_duplicates).
    """CREATE TABLE IF NOT EXISTS seen_ids (
        entity TEXT NOT NULL, message_id TEXT NOT NULL, taken REAL NOT NULL,
        PRIMARY KEY (entity, message_id))""",
    "CREATE INDEX IF NOT EXISTS seen_ids_by_time ON seen_ids (entity, taken)",
    # The sessions of session-enabled queues: who holds each one's lock, its state.
    """CREATE TABLE IF NOT EXISTS sessions (
        entity TEXT NOT NULL, session_id TEXT NOT NULL, lock_token TEXT, locked_until REAL,
        state BLOB, PRIMARY KEY (entity, session_id))""",
    # The last sequence number each queue or subscription gave (by lower-case name).
    "CREATE TABLE IF NOT EXISTS sequences (entity TEXT PRIMARY KEY, last INTEGER NOT NULL)",
)
# A file from before schema 5 numbered messages across the namespace (messages.seq):
# its entities count on from the highest number given, so that no new message takes
# the number of one still kept (old rows keep theirs: messages.number is null).
_NUMBER_FROM_OLD_FILE = (
    "INSERT OR IGNORE INTO sequences (entity, last) SELECT lower(name), "
    "(SELECT seq FROM sqlite_sequence WHERE name = 'messages') FROM entities "
    "WHERE EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages')")
# Created once the columns they index exist (an older file gets them added first).
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS messages_by_session ON messages (entity, session_id, seq)",
)

# Columns added after schema 1 shipped: a file without them gets them when it is
# opened (ALTER TABLE ... ADD COLUMN keeps every row; the defaults mean "as before").
# ``sections`` holds the AMQP sections of a message sent through the emulator (all but
# the body), ``visible_at`` a scheduled enqueue time, ``expires_at`` the end of its
# time to live; ``session_id`` the message's session, ``deferred`` whether it waits to
# be received by its sequence number; ``requires_session`` a session-enabled queue.
_ADDED_COLUMNS = (
    ("entities", "dead_lettering_on_message_expiration", "INTEGER NOT NULL DEFAULT 0"),
    ("messages", "sections", "BLOB"),
    ("messages", "visible_at", "REAL"),
    ("messages", "expires_at", "REAL"),
    ("entities", "requires_session", "INTEGER NOT NULL DEFAULT 0"),
    ("messages", "session_id", "TEXT"),
    ("messages", "deferred", "INTEGER NOT NULL DEFAULT 0"),
    ("messages", "number", "INTEGER"),
)

# sqlite3 exposes the primary result code only from Python 3.11 on; the messages
# are stable across SQLite versions, so they are the portable test.
_CORRUPT_TEXT = ("file is not a database", "malformed", "corrupt")


class Database:
    """One connection to a namespace file, used by one thread at a time.

    The connection is opened lazily (so constructors do no I/O) and serialised by
    a lock, which makes a :class:`Database` safe to share between threads.

    Args:
        path: the namespace file; created 0600 (directory 0700) when missing.
        namespace: the namespace's name, for errors.
        busy_deadline: how long to keep retrying a locked file before giving up
            with ``NamespaceUnavailable``.
    """

    def __init__(self, path: str, *, namespace: str, busy_deadline: float = 30.0) -> None:
        self.path = path
        self.namespace = namespace
        self.busy_deadline = busy_deadline
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a ``BEGIN IMMEDIATE`` transaction, retried while the file is busy.

        ``fn`` may run more than once, so it must only touch the database.

        Raises:
            NamespaceUnavailable: the file is corrupt, unreadable or stayed locked.
            GatewayError: whatever ``fn`` raised (the transaction is rolled back).
        """
        return self._run(fn, "BEGIN IMMEDIATE")

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in a read transaction (one consistent snapshot)."""
        return self._run(fn, "BEGIN")

    def close(self) -> None:
        """Close the connection; the next call opens it again. Safe to call twice."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _run(self, fn: Callable[[sqlite3.Connection], T], begin: str) -> T:
        # SQLite's busy handler waits inside a statement; tenacity retries the whole
        # transaction on top, in case another process holds the lock for long.
        def attempt() -> T:
            return transaction(self._connection(), fn, begin=begin)

        with self._lock:
            started = time.monotonic()
            try:
                try:
                    # Nearly every transaction succeeds at once: only a busy file pays
                    # for tenacity's bookkeeping (about a fifth of the emulator's CPU
                    # per single send, benchmarks/README.md "emulator CPU").
                    return attempt()
                except sqlite3.Error as exc:
                    if not is_busy(exc):
                        raise
                left = max(0.0, self.busy_deadline - (time.monotonic() - started))
                return busy_retrying(left)(attempt)
            except sqlite3.Error as exc:
                raise self._map(exc) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        directory = os.path.dirname(self.path) or "."
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            # Create the file ourselves so that it is 0600 from the first byte;
            # SQLite gives the -wal and -shm files the same mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        except OSError as exc:
            # Unusable until someone fixes it (not an outage that passes): fail over.
            raise NamespaceMisconfigured(
                f"cannot open namespace file {self.path}: {exc.strerror}; "
                "check the data directory and its permissions",
                namespace=self.namespace,
            ) from exc
        conn = sqlite3.connect(
            self.path, timeout=5.0, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version != SCHEMA_VERSION:
                transaction(conn, self._create_schema)
            if _missing_columns(conn):
                transaction(conn, _add_columns)
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise NamespaceMisconfigured(
                f"namespace file {self.path} has schema {version}, newer than this "
                f"geogateway's {SCHEMA_VERSION}: upgrade geogateway",
                namespace=self.namespace,
            )
        for statement in _SCHEMA:
            conn.execute(statement)
        if version < 5:
            conn.execute(_NUMBER_FROM_OLD_FILE)
        _add_columns(conn)
        for statement in _INDEXES:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _map(self, exc: sqlite3.Error) -> GatewayError:
        text = str(exc).lower()
        if any(t in text for t in _CORRUPT_TEXT):
            return NamespaceUnavailable(
                f"namespace file {self.path} is corrupt ({exc}): move it aside or "
                "delete it to start the namespace empty",
                namespace=self.namespace,
            )
        if is_busy(exc):
            return NamespaceUnavailable(
                f"namespace file {self.path} stayed locked by another process for "
                f"{self.busy_deadline:g}s; retry later",
                namespace=self.namespace,
            )
        return NamespaceUnavailable(
            f"namespace file {self.path} failed: {exc}; check the disk and the file",
            namespace=self.namespace,
        )


def _missing_columns(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    found: dict[str, set[str]] = {}
    for table, *_ in _ADDED_COLUMNS:
        if table not in found:
            found[table] = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    return [c for c in _ADDED_COLUMNS if c[1] not in found[c[0]]]


def _add_columns(conn: sqlite3.Connection) -> None:
    # Looked at again inside the write transaction: another process may have just added them.
    for table, column, declaration in _missing_columns(conn):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
