"""The queue file: opening, schema, identity and permissions (``_sqlite_tx`` maps errors).

Counting without a hot counter row
----------------------------------
``QueueFull`` needs the number and size of waiting messages on every put, and it
must hold with several processes on one file. Updating a counter row on every
insert would add a page to every commit (measured: about 12% of ``put``
throughput), so the counts are derived instead:

* ids are assigned by the queue as ``top + 1`` and never reused, so the number of
  messages ever put is the highest id ever used (``top``);
* each row carries ``total_bytes``, the running sum of ``size`` over every put;
* every delete (batched: ack, dead-letter, purge) goes through one helper,
  ``Store.remove``, which adds what it removed to ``counters`` in the same
  transaction, with the highest id and total it removed (for an empty table).
  A per-row trigger did the same at ~3 µs a row; one UPDATE per batch is cheaper.

``waiting = top - removed`` and ``bytes = top_total - removed_bytes``: one
index seek and one tiny row read inside the write transaction. A lone put skips
even that, and BEGIN/COMMIT, when the state of its handle's last put can be
trusted (``Store._put_alone`` explains when).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import tenacity

from durable_queue._bindings import BINDINGS_SCHEMA
from durable_queue._sqlite_tx import busy_retrying, corrupt_message, is_busy, mapped_errors
from replication import ConfigError, DurableQueueError, GatewayError, QueueCorrupt

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "connect_private",
    "file_bytes",
    "open_connection",
    "open_private_store",
    "quick_check",
    "secure_files",
    "tune_wal",
    "wal_pages",
]

# "GGDQ": marks a file as a geogateway durable queue (PRAGMA application_id).
APPLICATION_ID = 0x47474451
SCHEMA_VERSION = 1

# The write-ahead log is checkpointed into the file once it holds a sixteenth of the
# disk's free space in pages (at least WAL_MIN_PAGES, 128 KiB; at most SQLite's default
# of 1000, 4 MB, reached with 64 MB free), and truncated back to about that when it
# restarts (``tune_wal``). SQLite's fixed default made the -wal file up to 8 times what
# a small queue buffers: 178 KiB fitted on a 2 MiB disk, 850 KiB with this. A fixed
# small threshold would cost batched work half its speed on a disk with room (a
# checkpoint after nearly every commit): see benchmarks/README.md.
WAL_MIN_PAGES = 32
WAL_MAX_PAGES = 1000


def wal_pages(free: int | None, page_size: int) -> int:
    """The checkpoint threshold, in pages, with ``free`` bytes free (``None``: plenty)."""
    if free is None:
        return WAL_MAX_PAGES
    return max(WAL_MIN_PAGES, min(WAL_MAX_PAGES, free // 16 // page_size))


def tune_wal(conn: sqlite3.Connection, pages: int) -> None:
    """Checkpoint the WAL at ``pages`` pages, and truncate it back to about that."""
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    conn.execute(f"PRAGMA wal_autocheckpoint = {pages}")
    conn.execute(f"PRAGMA journal_size_limit = {(pages + 16) * page_size}")


_SCHEMA = (
    """
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    destination TEXT NOT NULL,
    message_id TEXT NOT NULL,
    partition_key TEXT,
    properties TEXT,
    body BLOB NOT NULL,
    enqueued_at REAL NOT NULL,
    size INTEGER NOT NULL,
    total_bytes INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
)
""",
    "CREATE INDEX messages_by_destination ON messages (destination, id)",
    """
CREATE TABLE counters (
    only INTEGER PRIMARY KEY CHECK (only = 0),
    removed INTEGER NOT NULL,
    removed_bytes INTEGER NOT NULL,
    last_id INTEGER NOT NULL,
    last_total INTEGER NOT NULL
)
""",
    "INSERT INTO counters VALUES (0, 0, 0, 0, 0)",
    """
CREATE TABLE dead_letters (
    id INTEGER PRIMARY KEY,
    destination TEXT NOT NULL,
    message_id TEXT NOT NULL,
    partition_key TEXT,
    properties TEXT,
    body BLOB NOT NULL,
    enqueued_at REAL NOT NULL,
    size INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    dead_lettered_at REAL NOT NULL
)
""",
    "CREATE INDEX dead_letters_by_destination ON dead_letters (destination, id)",
    """
CREATE TABLE leases (
    destination TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
)
""",
    BINDINGS_SCHEMA,
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_MAGIC = b"SQLite format 3\x00"


def _check_header(path: Path) -> None:
    # SQLite only notices a torn or truncated file when it reads the damaged
    # page, possibly much later; the header tells us cheaply, before we open it.
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb") as fp:
        header = fp.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise QueueCorrupt(corrupt_message(path, "file is not a database"))
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise QueueCorrupt(corrupt_message(path, "bad page size in the header"))
    if size % page_size:
        raise QueueCorrupt(
            corrupt_message(path, f"truncated: {size} bytes is not whole {page_size}-byte pages")
        )
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        # The newest pages may live in the WAL; SQLite recovers from it.
        return
    pages = int.from_bytes(header[28:32], "big")
    header_valid = header[24:28] == header[92:96] and pages > 0
    if header_valid and pages * page_size > size:
        raise QueueCorrupt(
            corrupt_message(path, f"truncated: {size} bytes, the header says {pages * page_size}")
        )


def secure_files(path: Path) -> None:
    """Make the queue file and its -wal/-shm readable by the owner only (0600)."""
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        # A file owned by someone else (a shared directory) cannot be changed,
        # and a -wal/-shm may vanish under us when another process closes.
        with contextlib.suppress(FileNotFoundError, PermissionError):
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)


def connect_private(path: str | os.PathLike[str], *, busy_timeout: float) -> sqlite3.Connection:
    """Create ``path`` readable by its owner only (0600) if missing, and open it.

    The connection is in autocommit mode (use :func:`transaction`) and may be used
    from several threads under the caller's lock. SQLite gives the -wal and -shm
    files the database file's mode.

    Raises:
        OSError: the file cannot be created or opened.
    """
    # Create the file ourselves so that it never exists with a wider mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)
    return sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )


def open_private_store(
    path: str,
    *,
    kind: str,
    busy_timeout: float,
    retrying: tenacity.Retrying,
    setup: Callable[[sqlite3.Connection], None],
    corrupt: Callable[[sqlite3.DatabaseError], Exception],
    read_only: bool = False,
) -> sqlite3.Connection:
    """Open a project SQLite store (created 0600) and run ``setup`` on it, retried
    while busy; every failure is one error naming the file.

    An existing file is checked first, on a read-only connection (``PRAGMA
    quick_check``): a damaged page is refused before anything is written, and the
    file is left byte for byte as it was.

    Args:
        kind: what the file is, for messages ("dedup store", "checkpoint store").
        corrupt: the error to raise for a damaged or foreign file.
        read_only: open the existing file with SQLite's ``mode=ro``: nothing is
            created or written (``setup`` must only read; writes fail later).

    Raises:
        ConfigError: the file cannot be opened (or, read-only, does not exist), or
            ``setup`` refused it.
        GatewayError: the file stayed locked past ``retrying``'s limit.
        Exception: what ``corrupt`` returns, for a damaged or foreign file.
    """
    if read_only or _has_pages(path):
        checked = _connect_read_only(path, kind=kind, busy_timeout=busy_timeout)
        _prepare(checked, quick_check, path=path, kind=kind, retrying=retrying,
                 corrupt=corrupt)
        if read_only:
            _prepare(checked, setup, path=path, kind=kind, retrying=retrying, corrupt=corrupt)
            return checked
        checked.close()
    try:
        conn = connect_private(path, busy_timeout=busy_timeout)
    except OSError as exc:
        raise ConfigError(f"cannot open {kind} {path}: {exc.strerror}") from exc
    _prepare(conn, setup, path=path, kind=kind, retrying=retrying, corrupt=corrupt)
    return conn


def _has_pages(path: str) -> bool:
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False  # missing (created next), or reported by the open that follows


def _connect_read_only(path: str, *, kind: str, busy_timeout: float) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise ConfigError(f"no {kind} at {path}: check the path")
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True, timeout=busy_timeout, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot open {kind} {path}: {exc}") from exc


def quick_check(conn: sqlite3.Connection) -> None:
    rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    found = [line.strip() for (text,) in rows for line in str(text).splitlines()]
    problems = [line for line in found if line and not line.startswith("***")]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError(f"damaged: {'; '.join(problems[:2])}")


def _prepare(
    conn: sqlite3.Connection,
    step: Callable[[sqlite3.Connection], None],
    *,
    path: str,
    kind: str,
    retrying: tenacity.Retrying,
    corrupt: Callable[[sqlite3.DatabaseError], Exception],
) -> None:
    """Run ``step`` on a new connection, retried while busy; close it on failure."""
    try:
        retrying(step, conn)
    except ConfigError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        if is_busy(exc):
            raise GatewayError(f"{kind} {path} stayed locked: {exc}") from exc
        raise corrupt(exc) from exc


def file_bytes(path: Path) -> int:
    """The size on disk of the queue: the database file plus its -wal file."""
    total = 0
    for name in (str(path), f"{path}-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(name).st_size
    return total


def open_connection(path: Path, *, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    """Open (creating when missing) the queue file and check it is a queue.

    Args:
        path: the queue file.
        synchronous: the ``PRAGMA synchronous`` level.
        busy_timeout: seconds to wait for another process's write lock.

    Raises:
        QueueCorrupt: the file is damaged or is not a geogateway queue.
        DurableQueueError: the file cannot be opened (permissions, disk, ...).

    Returns:
        A connection in autocommit mode (transactions are explicit).
    """
    _check_header(path)
    try:
        # Create the file 0600 ourselves: SQLite then creates -wal and -shm with
        # the same mode, with no process-wide umask change (not thread-safe).
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise DurableQueueError(f"cannot open queue file {path}: {exc.strerror}") from exc
    os.close(fd)
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        with mapped_errors(path):
            busy_retrying(busy_timeout)(_configure, conn, path, synchronous)
    except BaseException:
        conn.close()
        raise
    secure_files(path)
    return conn


def _check_identity(conn: sqlite3.Connection, path: Path) -> bool:
    """Whether the file is new (empty); raise if it is not a queue of our version."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and tables == 0:
        return True
    if app_id != APPLICATION_ID:
        raise QueueCorrupt(
            f"{path} is not a geogateway queue file (another program's SQLite database); "
            f"it was not modified: check the path"
        )
    if version != SCHEMA_VERSION:
        raise DurableQueueError(
            f"queue file {path} has schema version {version}; this geogateway "
            f"reads version {SCHEMA_VERSION}"
        )
    return False


def _configure(conn: sqlite3.Connection, path: Path, synchronous: str) -> None:
    # Check before switching to WAL: someone else's database must stay untouched.
    _check_identity(conn, path)
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise DurableQueueError(f"queue file {path}: cannot switch to WAL mode (got {mode})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    tune_wal(conn, WAL_MIN_PAGES)  # the Store sizes it to the file from then on
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may be creating the schema too: check and create in
        # one write transaction.
        if _check_identity(conn, path):
            for statement in _SCHEMA:
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
