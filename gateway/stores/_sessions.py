"""Where sessions' positions are kept between runs: the sender's next position of each
session, and the receiver's first position not handed over yet.

One SQLite file per use (the geo sender's in its state directory, the geo session
receiver's beside it), created 0600, in WAL mode, every write one ``BEGIN IMMEDIATE``
transaction, so that processes sharing a file (senders of one entity on one machine)
never give one position twice::

    positions(entity, session_id, next)    -- PRIMARY KEY (entity, session_id)

A sender's file is written with ``synchronous=FULL``: a position it gave out is never
given again, even after a power cut (a message stamped twice with one position would
look like a copy of another to the receivers).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import TypeVar

from durable_queue import busy_retrying, is_busy, open_private_store, transaction
from replication import ConfigError, GatewayError

__all__ = ["SqliteSessionStore"]

T = TypeVar("T")

# "ggss" in the file header: another SQLite file is refused, not written to.
_APPLICATION_ID = 0x67677373
_SYNCHRONOUS = ("NORMAL", "FULL", "EXTRA")
_SCHEMA = ("CREATE TABLE IF NOT EXISTS positions (entity TEXT NOT NULL, session_id TEXT NOT NULL, "
           "next INTEGER NOT NULL, PRIMARY KEY (entity, session_id)) WITHOUT ROWID")


class SqliteSessionStore:
    """The next position of each session of each entity, in a SQLite file.

    Args:
        path: the file; created (mode 0600, and its directory) when missing.
        synchronous: SQLite's ``synchronous``: ``NORMAL``, ``FULL`` (default) or ``EXTRA``.
        lock_timeout: seconds a write is retried while another process holds the file.

    Raises:
        ConfigError: a bad option; the file cannot be opened, is damaged or is not a
            session store (the message names it and says to move it aside).
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL",
                 lock_timeout: float = 30.0) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        self.path = os.fspath(path)
        directory = os.path.dirname(self.path)
        try:
            if directory:
                os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the directory of session store {self.path}: "
                              f"{exc.strerror}") from None
        self._lock = threading.Lock()
        self._retrying = busy_retrying(lock_timeout)
        mode = synchronous.upper()
        self._conn: sqlite3.Connection | None = open_private_store(
            self.path, kind="session store", busy_timeout=5.0, retrying=self._retrying,
            setup=lambda conn: self._setup(conn, mode),
            corrupt=lambda exc: ConfigError(
                f"session store {self.path} is corrupt or unreadable ({exc}): move it aside "
                "(sessions then start again from position 0)"))

    def _setup(self, conn: sqlite3.Connection, synchronous: str) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")

        def create(c: sqlite3.Connection) -> None:
            app_id = c.execute("PRAGMA application_id").fetchone()[0]
            tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id != _APPLICATION_ID and (app_id != 0 or tables):
                raise ConfigError(f"{self.path} is a SQLite file but not a session store: "
                                  "move it aside")
            c.execute(f"PRAGMA application_id={_APPLICATION_ID}")
            c.execute(_SCHEMA)
        transaction(conn, create)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise GatewayError(f"session store {self.path} is closed")
            try:
                return self._retrying(lambda: transaction(conn, work))
            except sqlite3.Error as exc:
                busy = " (it stayed locked by another process)" if is_busy(exc) else ""
                raise GatewayError(f"session store {self.path} failed{busy}: {exc}") from exc

    def reserve(self, entity: str, counts: Mapping[str, int]) -> dict[str, int]:
        """Give out ``counts[s]`` positions of each session ``s``, after those given before.

        Returns:
            The first position given to each session (a new session starts at 0).

        Raises:
            GatewayError: the file could not be written (nothing was given out).
        """
        def work(conn: sqlite3.Connection) -> dict[str, int]:
            firsts: dict[str, int] = {}
            for session, count in counts.items():
                row = conn.execute("SELECT next FROM positions WHERE entity = ? AND "
                                   "session_id = ?", (entity, session)).fetchone()
                first = 0 if row is None else int(row[0])
                conn.execute("INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT "
                             "(entity, session_id) DO UPDATE SET next = excluded.next",
                             (entity, session, first + count))
                firsts[session] = first
            return firsts
        return self._write(work)

    def next(self, entity: str, session_id: str) -> int | None:
        """The session's next position; ``None`` when it has none yet."""
        def work(conn: sqlite3.Connection) -> int | None:
            row = conn.execute("SELECT next FROM positions WHERE entity = ? AND session_id = ?",
                               (entity, session_id)).fetchone()
            return None if row is None else int(row[0])
        return self._write(work)

    def advance(self, entity: str, session_id: str, next_position: int) -> None:
        """Record that positions before ``next_position`` are passed (never moves back)."""
        self._write(lambda conn: conn.execute(
            "INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT (entity, session_id) "
            "DO UPDATE SET next = max(next, excluded.next)",
            (entity, session_id, next_position)))

    def close(self) -> None:
        """Close the file. Safe to call twice."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
