"""The persistent de-duplication store: one SQLite file shared by receiver processes.

Implements :class:`replication.DedupStore` (the policy lives in
:class:`replication.Deduplicator`). Two tables, full ids::

    done(message_id PRIMARY KEY, done_at)           indexed by done_at for pruning
    claims(message_id PRIMARY KEY, owner, expires)   in-flight leases

Every write is one ``BEGIN IMMEDIATE`` transaction, so a claim is atomic across
processes: two receivers that get the two copies of a message never both see
``DELIVER`` while the lease runs. The file is in WAL mode (readers do not block the
writer; a crash mid-transaction rolls back on the next open) and is created with
mode 0600 (SQLite gives the ``-wal`` and ``-shm`` files the same mode), because
message ids can be business data.

Transactional inbox
-------------------
:meth:`SqliteDedupStore.finish_with_effect` runs the application's own writes (into
tables it owns *in this same file*) and the done mark in one ``BEGIN IMMEDIATE``
transaction. A handler whose only effect is such writes is then exactly-once: a
process killed at any point leaves either the rows and the mark, or neither (and the
copy is delivered again, after the claim's lease). With a handler whose effect lives
elsewhere (an HTTP call, another database), a crash between that effect and the mark
re-delivers the message: at-least-once. The application creates its tables through
a connection of its own (or in an effect); the file stays a dedup store.

``synchronous="NORMAL"`` (the default) does not fsync every commit: after a power
loss (not a process crash) the last few done marks may be lost and those messages
delivered again. Use ``"FULL"`` when that matters more than throughput.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from durable_queue import busy_retrying, is_busy, open_private_store, transaction
from replication import (
    DEFAULT_DEDUP_WINDOW,
    ConfigError,
    DedupStore,
    DedupWindow,
    GatewayError,
    Verdict,
)

__all__ = ["SqliteDedupStore"]

T = TypeVar("T")

# "ggdd" in the file header, so that a file that is some other SQLite database is
# refused instead of having tables added to it.
_APPLICATION_ID = 0x67676464
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
# SQLite's default limit on host parameters was 999 before 3.32; stay below it.
_CHUNK = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS done (
    message_id TEXT PRIMARY KEY,
    done_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS done_by_time ON done (done_at);
CREATE TABLE IF NOT EXISTS claims (
    message_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL
) WITHOUT ROWID;
"""


class SqliteDedupStore(DedupStore):
    """A :class:`replication.DedupStore` in a SQLite file, shared by processes.

    Args:
        path: the store file; created (mode 0600) when missing. Its directory must exist.
        window: the authoritative window (see :class:`replication.DedupStore`).
        synchronous: SQLite's ``synchronous`` setting: ``OFF``, ``NORMAL``, ``FULL``
            or ``EXTRA`` (see the module docstring).
        busy_timeout: seconds one statement waits for another process's lock.
        lock_timeout: seconds a transaction is retried while the file stays locked
            before :class:`~replication.GatewayError` is raised.

    Raises:
        ConfigError: a bad option, or the file cannot be opened, is corrupt (a
            damaged page is found at open by ``PRAGMA quick_check``, before anything
            is written), or is not a dedup store; the one-line message names the
            file and says to move it aside.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        window: DedupWindow = DEFAULT_DEDUP_WINDOW,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
        lock_timeout: float = 60.0,
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        if not busy_timeout > 0 or not lock_timeout > 0:
            raise ConfigError("busy_timeout and lock_timeout must be > 0")
        self.window = window
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._retrying = busy_retrying(lock_timeout)
        self._conn: sqlite3.Connection | None = self._open(synchronous.upper(), busy_timeout)

    def _open(self, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
        return open_private_store(
            self.path, kind="dedup store", busy_timeout=busy_timeout, retrying=self._retrying,
            setup=lambda conn: self._setup(conn, synchronous),
            corrupt=lambda exc: ConfigError(
                f"dedup store {self.path} is corrupt or unreadable ({exc}): move it aside "
                f"to start with an empty window (ids it remembered may be delivered again)"
            ),
        )

    def _setup(self, conn: sqlite3.Connection, synchronous: str) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id != _APPLICATION_ID and (app_id != 0 or tables):
                raise ConfigError(
                    f"{self.path} is a SQLite file but not a dedup store: move it aside"
                )
            conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _run(self, attempt: Callable[[], T]) -> T:
        # busy_timeout waits inside one statement; tenacity retries the whole
        # transaction on top of it, so "database is locked" does not reach callers.
        # Most transactions get the lock at once: only a busy one pays for tenacity.
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        return self._retrying(attempt)

    def _call(self, attempt: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._conn is None:
                raise RuntimeError("the dedup store is closed")
            conn = self._conn
            try:
                return self._run(lambda: attempt(conn))
            except sqlite3.DatabaseError as exc:
                if is_busy(exc):
                    raise GatewayError(f"dedup store {self.path} stayed locked: {exc}") from exc
                raise GatewayError(f"dedup store {self.path} failed: {exc}") from exc

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        return self._call(lambda conn: transaction(conn, body))

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        """See :meth:`replication.DedupStore.claim`; one transaction for the batch."""
        cutoff = now - self.window.seconds

        def body(conn: sqlite3.Connection) -> list[Verdict]:
            unique = list(dict.fromkeys(message_ids))
            done: set[str] = set()
            held: set[str] = set()
            for i in range(0, len(unique), _CHUNK):
                chunk = unique[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                done.update(
                    row[0]
                    for row in conn.execute(
                        "SELECT message_id FROM done"
                        f" WHERE done_at > ? AND message_id IN ({marks})",
                        (cutoff, *chunk),
                    )
                )
                held.update(
                    row[0]
                    for row in conn.execute(
                        # A claim of its own is one whose answer it never got.
                        "SELECT message_id FROM claims"
                        f" WHERE expires > ? AND owner != ? AND message_id IN ({marks})",
                        (now, owner, *chunk),
                    )
                )
            verdicts: list[Verdict] = []
            for message_id in message_ids:
                if message_id in done:
                    verdicts.append(Verdict.DUPLICATE)
                elif message_id in held:
                    verdicts.append(Verdict.HOLD)
                else:
                    held.add(message_id)  # a repeat later in this batch is HOLD
                    verdicts.append(Verdict.DELIVER)
            conn.executemany(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?)",
                [
                    (mid, owner, now + lease)
                    for mid, v in zip(message_ids, verdicts, strict=True)
                    if v is Verdict.DELIVER
                ],
            )
            return verdicts

        return self._write(body)

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        """See :meth:`replication.DedupStore.finish`."""
        self.finish_many([message_id], owner=owner, succeeded=succeeded, now=now)

    def finish_many(
        self, message_ids: Sequence[str], *, owner: str, succeeded: bool, now: float
    ) -> None:
        """See :meth:`replication.DedupStore.finish_many`; one transaction."""

        def body(conn: sqlite3.Connection) -> None:
            if succeeded:
                conn.executemany(
                    "INSERT OR REPLACE INTO done VALUES (?, ?)", [(m, now) for m in message_ids]
                )
            conn.executemany(
                "DELETE FROM claims WHERE message_id = ? AND owner = ?",
                [(m, owner) for m in message_ids],
            )

        self._write(body)

    def finish_with_effect(
        self,
        message_id: str,
        *,
        owner: str,
        now: float,
        effect: Callable[[sqlite3.Connection], None] | Callable[[Any], None],
    ) -> bool:
        """The transactional inbox: ``effect(conn)`` and the done mark in ONE transaction.

        Inside one ``BEGIN IMMEDIATE`` transaction on this store's connection: if
        ``message_id`` is already done within the window, nothing is run (False);
        otherwise ``effect(conn)`` runs (the application's writes into its own tables
        in this file), the id is recorded as done at ``now`` and ``owner``'s claim
        ends (True). If ``effect`` raises, both its writes and the mark are rolled
        back and the exception propagates (the claim is kept; release it with
        ``finish(..., succeeded=False)``).

        ``effect`` must write only through ``conn`` and must not commit, roll back or
        close it; it may be called again after a rollback, when the whole transaction
        is retried because another process held the file's lock. It runs under this
        store's lock and SQLite's write lock: every other writer of the file waits.

        Raises:
            GatewayError: SQLite failed (including an ``sqlite3`` error raised by
                ``effect``, e.g. a constraint violation), or the file stayed locked.
            ConfigError: ``effect`` ended the transaction itself.
        """
        cutoff = now - self.window.seconds

        def body(conn: sqlite3.Connection) -> bool:
            done = conn.execute(
                "SELECT 1 FROM done WHERE message_id = ? AND done_at > ?", (message_id, cutoff)
            ).fetchone()
            if done is None:
                effect(conn)
                if not conn.in_transaction:
                    raise ConfigError("the effect of finish_with_effect must not commit or "
                                      "roll back the store's transaction")
                conn.execute("INSERT OR REPLACE INTO done VALUES (?, ?)", (message_id, now))
            conn.execute(
                "DELETE FROM claims WHERE message_id = ? AND owner = ?", (message_id, owner)
            )
            return done is None

        return self._write(body)

    def peek(self, message_id: str, *, now: float) -> Verdict:
        """See :meth:`replication.DedupStore.peek`; reads only."""
        cutoff = now - self.window.seconds

        def attempt(conn: sqlite3.Connection) -> Verdict:
            row = conn.execute(
                "SELECT (SELECT done_at > ? FROM done WHERE message_id = ?),"
                " (SELECT expires > ? FROM claims WHERE message_id = ?)",
                (cutoff, message_id, now, message_id),
            ).fetchone()
            if row[0]:
                return Verdict.DUPLICATE
            return Verdict.HOLD if row[1] else Verdict.DELIVER

        return self._call(attempt)

    def prune(self, *, now: float, window: DedupWindow) -> int:
        """See :meth:`replication.DedupStore.prune`; one transaction.

        Counting the done rows walks the ``done_at`` index (tens of ms at a million
        rows), which is why :class:`replication.Deduplicator` prunes only now and then.
        """

        def body(conn: sqlite3.Connection) -> int:
            removed = conn.execute(
                "DELETE FROM done WHERE done_at <= ?", (now - window.seconds,)
            ).rowcount
            removed += conn.execute("DELETE FROM claims WHERE expires <= ?", (now,)).rowcount
            (size,) = conn.execute("SELECT count(*) FROM done").fetchone()
            if size > window.count:
                removed += conn.execute(
                    "DELETE FROM done WHERE message_id IN"
                    " (SELECT message_id FROM done ORDER BY done_at LIMIT ?)",
                    (size - window.count,),
                ).rowcount
            return int(removed)

        return self._write(body)

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
