"""The transactional core under ``DurableQueue``: one connection, its lock, retries."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from durable_queue import _shrink
from durable_queue._rows import encode_properties
from durable_queue._space import DiskRoom
from durable_queue._sqlite import open_connection, quick_check, tune_wal, wal_pages
from durable_queue._sqlite_tx import (
    busy_retrying,
    corrupt_message,
    is_busy,
    is_corrupt,
    is_full,
    transaction,
    translate,
)
from replication import DurableQueueError, Message, QueueCorrupt, QueueFull

__all__ = ["Row", "Store"]

T = TypeVar("T")

Row = tuple[str, Message]
# (highest id ever used, its running byte total, messages removed, bytes removed)
_State = tuple[int, int, int, int]

# The highest id ever used and the running byte total, with what deletes took
# away: see the module docstring of _sqlite for why this replaces a counter row.
_STATE = """
SELECT max(coalesce(m.id, 0), c.last_id), max(coalesce(m.total_bytes, 0), c.last_total),
       c.removed, c.removed_bytes
FROM counters AS c
LEFT JOIN (SELECT id, total_bytes FROM messages ORDER BY id DESC LIMIT 1) AS m ON 1
"""
_COUNT_REMOVED = """
UPDATE counters SET removed = removed + ?, removed_bytes = removed_bytes + ?,
    last_id = max(last_id, ?), last_total = max(last_total, ?)
"""
# Older SQLite builds allow 999 parameters per statement.
_CHUNK = 500
# The lone-put fast path: one statement in autocommit, no BEGIN/COMMIT round
# trips. It inserts only if nobody removed a message with this id or above.
_INSERT_IF_FRESH = """
INSERT INTO messages (id, destination, message_id, partition_key, properties, body,
                      enqueued_at, size, total_bytes)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? FROM counters WHERE last_id < ?
"""
_INSERT = """
INSERT INTO messages (id, destination, message_id, partition_key, properties, body,
                      enqueued_at, size, total_bytes)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


class Store:
    """One connection to a queue file, shared by threads under a lock.

    ``write`` runs a function in a ``BEGIN IMMEDIATE`` transaction and ``read``
    outside one; both retry on SQLITE_BUSY and map sqlite3 errors onto the
    project's tree. ``insert`` assigns ids and enforces the caps.

    A damaged file is never written to: the first write other than a put reads the
    whole file first (``verify``), and once damage was found (by that check or by
    any read) every write, puts included, raises ``QueueCorrupt`` without touching
    the file. Puts only append, so they skip the check; they check the disk's room
    instead (``_space``).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_messages: int | None,
        max_bytes: int | None,
        synchronous: str,
        busy_timeout: float,
        shrink: bool = True,
    ) -> None:
        self.path = path
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.shrinks = shrink
        self._conn: sqlite3.Connection | None = open_connection(
            path, synchronous=synchronous, busy_timeout=busy_timeout
        )
        self._lock = threading.RLock()
        self._retrying = busy_retrying(busy_timeout)
        self.commits = 0
        # The state as of our last put; see _put_alone for why it may be reused.
        self._state: _State | None = None
        self.room = DiskRoom(path)
        #: Whether this handle changed the file (for an honest QueueCorrupt text).
        self.modified = False
        #: The damage found in the file, if any: from then on nothing is written.
        self.damage: QueueCorrupt | None = None
        #: When ``verify`` last read the whole file and found it sound (monotonic).
        self.checked_at: float | None = None
        # The WAL's checkpoint threshold follows the disk's free space (see _sqlite).
        conn = self.live()
        self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        self._wal_pages = 0
        self._retune(conn, self.room.free_now())

    def live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise DurableQueueError(f"queue {self.path} is closed")
        return self._conn

    def _fail(self, exc: sqlite3.Error, needed: int | None = None) -> DurableQueueError:
        """The project's error for ``exc``; a damaged file is remembered as such."""
        error = translate(exc, self.path, modified=self.modified, needed=needed)
        if isinstance(error, QueueCorrupt) and self.damage is None:
            self.damage = error
        return error

    def _refuse_if_damaged(self) -> None:
        if self.damage is not None:
            raise QueueCorrupt(str(self.damage)) from self.damage

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # Retry on SQLITE_BUSY (rare: busy_timeout already waits) and map errors.
        try:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
            result: T = self._retrying(fn, *args)
            return result
        except sqlite3.Error as exc:
            raise self._fail(exc) from exc

    def verify(self, *, max_age: float | None = None) -> None:
        """Read the whole file (``PRAGMA quick_check``); nothing is written.

        Args:
            max_age: skip it when this handle found the file sound less than this
                many seconds ago.

        Raises:
            QueueCorrupt: the file is damaged (remembered: nothing is written after).
        """
        with self._lock:
            self._refuse_if_damaged()
            if (max_age is not None and self.checked_at is not None
                    and time.monotonic() - self.checked_at < max_age):
                return
            conn = self.live()
            try:
                self._retrying(quick_check, conn)
            except sqlite3.OperationalError as exc:
                if not is_corrupt(exc):
                    raise self._fail(exc) from exc
                raise self._damaged(str(exc)) from exc
            except sqlite3.DatabaseError as exc:  # what quick_check reports, or malformed
                raise self._damaged(str(exc)) from exc
            self.checked_at = time.monotonic()

    def _damaged(self, detail: str) -> QueueCorrupt:
        self.damage = QueueCorrupt(corrupt_message(self.path, detail, modified=self.modified))
        return self.damage

    def write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` in one write transaction (BEGIN IMMEDIATE ... COMMIT), after
        ``verify`` the first time (nothing is written to a damaged file).

        Raises:
            QueueCorrupt: the file is damaged; it was not written to.
        """
        with self._lock:
            conn = self.live()
            self._refuse_if_damaged()
            if self.checked_at is None:
                self.verify()
            # Any write but a put may change the counters: drop the cached state.
            self._state = None
            changes = conn.total_changes
            result: T = self._run(transaction, conn, work)
            if conn.total_changes != changes:
                self.modified = True
                self._retune(conn, self.room.free_now())
            return result

    def _retune(self, conn: sqlite3.Connection, free: int | None) -> None:
        """Size the WAL's checkpoint threshold to the free space (see ``_sqlite``), so
        that a nearly full disk holds what the queue buffers within twice its size."""
        pages = wal_pages(free, self._page_size)
        if pages != self._wal_pages:
            try:
                tune_wal(conn, pages)
            except sqlite3.Error as exc:
                raise self._fail(exc) from exc
            self._wal_pages = pages

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` outside a transaction (each statement reads a snapshot)."""
        with self._lock:
            return self._run(work, self.live())

    def put_rows(self, rows: Sequence[Row], *, all_or_nothing: bool) -> list[int | QueueFull]:
        """Insert ``rows`` in one transaction: the put path, kept flat because it is hot.

        Returns:
            Per row, its id or the ``QueueFull`` it met; with ``all_or_nothing``
            the first ``QueueFull`` is raised instead and nothing is stored.
        """
        with self._lock:
            conn = self.live()
            if self.damage is not None:
                self._refuse_if_damaged()
            free = self.room.free_now()  # None: plenty, not even a sum of sizes
            if free is not None:
                self.room.check(sum(m.size for _, m in rows), len(rows), free)
            if len(rows) == 1 and self._state is not None:
                row_id = self._put_alone(conn, rows[0])
                if row_id is not None:
                    self.commits += 1
                    self.modified = True
                    self._retune(conn, free)
                    return [row_id]
            try:
                # _run inlined: every frame counts on a path that is ~130 µs in all.
                try:
                    results = self._put_transaction(conn, rows, all_or_nothing)
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                    results = self._retrying(self._put_transaction, conn, rows, all_or_nothing)
            except sqlite3.Error as exc:
                self._state = None
                raise self._fail(exc, self._needed(rows)) from exc
            except BaseException:
                self._state = None
                raise
            self.commits += 1
            self.modified = True
            self._retune(conn, free)
            return results

    def _needed(self, rows: Sequence[Row]) -> int:
        return self.room.needed(sum(m.size for _, m in rows), len(rows))

    def commit_puts(self, rows: list[Row]) -> list[int | QueueFull]:
        """``put_rows`` for group commit: each row succeeds or fails on its own."""
        return self.put_rows(rows, all_or_nothing=False)

    def _put_transaction(
        self, conn: sqlite3.Connection, rows: Sequence[Row], all_or_nothing: bool
    ) -> list[int | QueueFull]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            results, state = self.insert(conn, rows)
            if all_or_nothing:
                for result in results:
                    if isinstance(result, QueueFull):
                        raise result
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._state = state  # committed: this is the file's state now
        return results

    def _put_alone(self, conn: sqlite3.Connection, row: Row) -> int | None:
        """Insert one row with one statement, trusting the state of our last put.

        Other connections can only make that state conservative (more waiting
        than there really is, since they can only have removed messages), except
        in two ways, both caught here: they inserted (then id ``top + 1`` exists
        and the insert fails on the primary key) or they removed messages at or
        above ``top + 1`` (then ``counters.last_id`` says so and nothing is
        inserted). Near the caps, or on any doubt, returns ``None`` and the caller
        takes the transactional path, which reads the real state.

        Returns:
            The new id, or ``None`` when the transactional path must decide.
        """
        top, total, removed, removed_bytes = self._state  # type: ignore[misc]
        destination, message = row
        size = message.size
        if (self.max_messages is not None and top - removed >= self.max_messages) or (
            self.max_bytes is not None and total - removed_bytes + size > self.max_bytes
        ):
            return None
        row_id = top + 1
        try:
            cursor = conn.execute(
                _INSERT_IF_FRESH,
                (row_id, destination, message.message_id, message.partition_key,
                 encode_properties(message),
                 message.body, time.time(), size, total + size, row_id),
            )  # fmt: skip
        except sqlite3.IntegrityError:
            return None
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None  # the transactional path waits and retries
            self._state = None
            raise self._fail(exc, self._needed([row])) from exc
        except sqlite3.Error as exc:
            self._state = None
            raise self._fail(exc) from exc
        if cursor.rowcount != 1:
            return None
        self._state = (row_id, total + size, removed, removed_bytes)
        return row_id

    def insert(
        self, conn: sqlite3.Connection, rows: Sequence[Row]
    ) -> tuple[list[int | QueueFull], _State]:
        """Assign ids and check the caps; runs inside a write transaction.

        Returns:
            Per row, its id or ``QueueFull``; and the state after the inserts.
        """
        top, total, removed, removed_bytes = conn.execute(_STATE).fetchone()
        count, used = top - removed, total - removed_bytes
        max_messages, max_bytes = self.max_messages, self.max_bytes
        now = time.time()
        params = []
        results: list[int | QueueFull] = []
        for destination, message in rows:
            size = message.size
            if (max_messages is not None and count >= max_messages) or (
                max_bytes is not None and used + size > max_bytes
            ):
                results.append(self.full(count, used))
                continue
            top += 1
            total += size
            count += 1
            used += size
            params.append(
                (top, destination, message.message_id, message.partition_key,
                 encode_properties(message),
                 message.body, now, size, total)
            )  # fmt: skip
            results.append(top)
        if len(params) == 1:
            conn.execute(_INSERT, params[0])
        elif params:
            conn.executemany(_INSERT, params)
        return results, (top, total, removed, removed_bytes)

    @staticmethod
    def remove(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> int:
        """Delete waiting messages ``WHERE ...`` and count them out; in a write transaction.

        Every delete from ``messages`` must come through here, or the counters
        behind ``QueueFull`` and ``len`` drift (see the ``_sqlite`` docstring).

        Returns:
            How many were deleted.
        """
        sql = f"SELECT count(*), total(size), max(id), max(total_bytes) FROM messages {where}"
        count, size, top_id, top_total = conn.execute(sql, params).fetchone()
        if count:
            conn.execute(f"DELETE FROM messages {where}", params)
            conn.execute(_COUNT_REMOVED, (count, int(size), top_id, top_total))
        return int(count)

    def remove_ids(self, conn: sqlite3.Connection, ids: Sequence[int]) -> int:
        """``remove`` by row id, in chunks; ids no longer waiting are skipped."""
        removed = 0
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            removed += self.remove(conn, f"WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        return removed

    def full(self, count: int, used: int) -> QueueFull:
        return QueueFull(
            f"queue {self.path} is full ({count} messages, {used} bytes; caps "
            f"{self.max_messages} messages, {self.max_bytes} bytes); the message was not stored"
        )

    def waiting(self) -> int:
        """The number of waiting messages, from the counters (no table scan)."""
        top, _total, removed, _bytes = self.read(lambda c: c.execute(_STATE).fetchone())
        return int(top - removed)

    def shrink(self, *, force: bool = False) -> bool:
        """Give free pages back to the file system when enough are free (see
        ``_shrink``); a file locked by another process is left for next time.

        Returns:
            Whether the file was vacuumed.
        """
        if not (self.shrinks or force):
            return False
        with self._lock:
            conn = self.live()
            if self.damage is not None:
                return False  # a damaged file is never written to
            if self.checked_at is None:
                self.verify()

            def empty() -> bool:
                top, _total, removed, _bytes = conn.execute(_STATE).fetchone()
                return bool(top == removed)

            try:
                shrunk = _shrink.shrink(conn, empty=empty, force=force)
            except sqlite3.Error as exc:
                # Busy: left for next time. Full: a VACUUM needs room for a copy of
                # what is left, and the disk has none now; the queue works without.
                if is_busy(exc) or is_full(exc):
                    return False
                raise self._fail(exc) from exc
            self.modified = self.modified or shrunk
            return shrunk

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise self._fail(exc) from exc
