"""Salvage: copy every message that can still be read from a damaged queue file into a
new one, and say what could not be read.

The damaged file is opened with SQLite's ``mode=ro`` and never written (its ``-wal``,
if a crash left one, is read, not checkpointed). The new file is written under a
temporary name beside the target (created 0600), checked, and renamed into place, so
a salvage that fails half-way leaves no half-written queue behind. Messages keep their
row ids (so their order per destination), MessageIds, properties and attempts; dead
letters and the destinations' bindings are copied too; leases are not (nobody drains
the new file yet).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import uuid
from collections import Counter
from pathlib import Path

from durable_queue._bindings import BINDINGS_SCHEMA
from durable_queue._records import SalvagedDestination, SalvageReport, UnreadableRows
from durable_queue._salvage_read import (
    TableRead,
    damaged_pages,
    read_table,
    valid_properties,
)
from durable_queue._sqlite import APPLICATION_ID, open_connection, quick_check
from durable_queue._sqlite_tx import mapped_errors, transaction
from replication import ConfigError, QueueCorrupt

__all__ = ["salvage"]

_MESSAGES = (
    "id, destination, message_id, partition_key, properties, body, enqueued_at, size, "
    "total_bytes, attempts, last_error"
)
_DEAD = (
    "id, destination, message_id, partition_key, properties, body, enqueued_at, size, "
    "attempts, reason, dead_lettered_at"
)
_BINDINGS = "rowid, destination, owner, bound_at"
_NUMBER = (int, float)


def _text(value: object, *, optional: bool = False) -> bool:
    return (optional and value is None) or isinstance(value, str)


def _message_row(row: tuple[object, ...]) -> bool:
    _id, dest, mid, key, props, body, at, size, _total, attempts, error = row
    return (isinstance(dest, str) and bool(dest) and _text(mid) and _text(key, optional=True)
            and valid_properties(props) and isinstance(body, bytes)
            and isinstance(at, _NUMBER) and isinstance(size, int)
            and isinstance(attempts, int) and _text(error, optional=True))


def _dead_row(row: tuple[object, ...]) -> bool:
    _id, dest, mid, key, props, body, at, size, attempts, reason, dead_at = row
    return (isinstance(dest, str) and bool(dest) and _text(mid) and _text(key, optional=True)
            and valid_properties(props) and isinstance(body, bytes)
            and isinstance(at, _NUMBER) and isinstance(size, int)
            and isinstance(attempts, int) and _text(reason) and isinstance(dead_at, _NUMBER))


def _binding_row(row: tuple[object, ...]) -> bool:
    _rowid, dest, owner, at = row
    return _text(dest) and _text(owner) and isinstance(at, _NUMBER)


def salvage(
    source: str | os.PathLike[str], target: str | os.PathLike[str], *, force: bool = False
) -> SalvageReport:
    """Copy every readable message of the queue file ``source`` into a new queue file.

    ``source`` is only read. Waiting messages keep their order per destination (and
    their row ids, MessageIds, properties and attempts); dead letters and bindings are
    copied as well.

    Args:
        source: the (damaged) queue file.
        target: the new queue file; created readable by its owner only.
        force: replace ``target`` (and its ``-wal``/``-shm``) if it exists.

    Raises:
        ConfigError: ``source`` is missing, ``target`` exists (without ``force``), is
            ``source`` itself, or cannot be created.
        QueueCorrupt: nothing of ``source`` can be read as a geogateway queue (its
            header or schema page is damaged, or it is another program's file).
        DurableQueueError: the new file cannot be written (``QueueFull``: the disk).

    Returns:
        What was copied and what could not be read.
    """
    src, dst = Path(os.fspath(source)), Path(os.fspath(target))
    _check_paths(src, dst, force=force)
    conn = _open_read_only(src)
    try:
        messages = read_table(conn, "messages", _MESSAGES, valid=_message_row,
                              index="messages_by_destination")
        dead = read_table(conn, "dead_letters", _DEAD, valid=_dead_row,
                          index="dead_letters_by_destination")
        bindings = read_table(conn, "bindings", _BINDINGS, valid=_binding_row)
        pages = damaged_pages(conn) if (messages.unreadable or dead.unreadable
                                        or bindings.unreadable) else ()
        last_id = _last_id(conn)
    finally:
        conn.close()
    _write(dst, messages, dead, bindings, last_id=last_id, force=force)
    return _report(src, dst, messages, dead, bindings, pages)


def _check_paths(src: Path, dst: Path, *, force: bool) -> None:
    if not src.is_file():
        raise ConfigError(f"no queue file at {src}: check the path")
    if dst.exists() and (dst.resolve() == src.resolve() or os.path.samefile(dst, src)):
        raise ConfigError(f"{dst} is the queue file being salvaged: choose another -o")
    if dst.is_dir():
        raise ConfigError(f"{dst} is a directory: give a file name with -o")
    existing = [p for p in _family(dst) if p.exists()]
    if existing and not force:
        raise ConfigError(
            f"{existing[0]} exists: choose another -o, or pass --force to replace it"
        )


def _family(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm")]


def _open_read_only(src: Path) -> sqlite3.Connection:
    uri = f"{src.absolute().as_uri()}?mode=ro"
    if not Path(f"{src}-wal").exists():
        # No -wal: no connection has the file open (in WAL mode one exists while any
        # does) and everything is in the file. ``immutable`` reads it without making
        # the -wal and -shm files that a read-only connection cannot remove.
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        raise QueueCorrupt(
            f"nothing of {src} can be read as a queue ({exc}): its first page (the "
            f"header and the list of tables) is damaged; the file was not modified"
        ) from exc
    if app_id != APPLICATION_ID or "messages" not in tables:
        conn.close()
        raise QueueCorrupt(
            f"{src} is not a geogateway queue file; it was not modified: check the path"
        )
    return conn


def _last_id(conn: sqlite3.Connection) -> int:
    """The highest message id the file ever used, as far as its counters say (0: unknown),
    so that ids in the new file are never reused."""
    try:
        row = conn.execute("SELECT last_id FROM counters").fetchone()
    except sqlite3.DatabaseError:
        return 0
    return int(row[0]) if row and isinstance(row[0], int) else 0


def _write(
    dst: Path, messages: TableRead, dead: TableRead, bindings: TableRead, *,
    last_id: int, force: bool,
) -> None:
    tmp = dst.with_name(f".{dst.name}.salvage-{uuid.uuid4().hex[:8]}")
    try:
        # Created here, exclusively and 0600; open_connection gives it the schema.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        why = (f"the directory {dst.absolute().parent} does not exist; create it or"
               if exc.errno == errno.ENOENT else f"{exc.strerror};")
        raise ConfigError(
            f"cannot create {dst}: {why} choose another -o in a directory you can write"
        ) from exc
    try:
        conn = open_connection(tmp, synchronous="FULL", busy_timeout=5.0)
        try:
            with mapped_errors(tmp):
                transaction(conn, lambda c: _fill(c, messages, dead, bindings, last_id))
                quick_check(conn)
        finally:
            conn.close()
        if force:
            for stale in _family(dst)[1:]:
                # A stale -wal beside the new file would be read as part of it.
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
        os.replace(tmp, dst)
    except BaseException:
        for leftover in _family(tmp):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        raise


def _fill(
    conn: sqlite3.Connection, messages: TableRead, dead: TableRead, bindings: TableRead,
    last_id: int,
) -> None:
    rows, total = [], 0
    for row in messages.rows:
        # The running byte total is recounted over what was kept (see _sqlite).
        total += int(row[7])
        rows.append((*row[:8], total, *row[9:]))
    conn.executemany(f"INSERT INTO messages ({_MESSAGES}) VALUES ({_marks(11)})", rows)
    conn.executemany(f"INSERT INTO dead_letters ({_DEAD}) VALUES ({_marks(11)})", dead.rows)
    conn.execute(BINDINGS_SCHEMA)
    conn.executemany("INSERT INTO bindings (destination, owner, bound_at) VALUES (?, ?, ?)",
                     [r[1:] for r in bindings.rows])
    top = max([last_id, *(int(r[0]) for r in messages.rows)])
    # waiting = top - removed and bytes = total - removed_bytes, as for any queue file.
    conn.execute("UPDATE counters SET removed = ?, removed_bytes = 0, last_id = ?, "
                 "last_total = ?", (top - len(rows), top, total))


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _report(
    src: Path, dst: Path, messages: TableRead, dead: TableRead, bindings: TableRead,
    pages: tuple[int, ...],
) -> SalvageReport:
    copied = Counter(str(r[1]) for r in messages.rows)
    copied_dead = Counter(str(r[1]) for r in dead.rows)
    unreadable: list[UnreadableRows] = [*messages.unreadable, *dead.unreadable,
                                        *bindings.unreadable]
    lost = messages.lost
    names = sorted({*copied, *copied_dead, *lost})
    return SalvageReport(
        source=str(src),
        target=str(dst),
        messages=len(messages.rows),
        dead_letters=len(dead.rows),
        bindings=len(bindings.rows),
        destinations=tuple(
            SalvagedDestination(destination=name, messages=copied[name],
                                dead_letters=copied_dead[name],
                                unreadable=lost[name] if messages.exact else None)
            for name in names
        ),
        unreadable=tuple(unreadable),
        damaged_pages=pages,
    )
