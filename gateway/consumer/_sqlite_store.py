"""The SQLite checkpoint store: one file shared by the consumers of one machine.

Four tables, keyed like the Azure SDK's records::

    ownership(namespace, eventhub, consumer_group, partition_id) -> owner_id, etag, time
    checkpoints(namespace, eventhub, consumer_group, partition_id) -> offset, sequence_number
    heartbeats(namespace, eventhub, consumer_group, instance_id) -> time
    heartbeat_wakes(namespace, eventhub, consumer_group, instance_id)

A wake is a row in ``heartbeat_wakes``: the instance's next heartbeat deletes it,
in the transaction that writes the heartbeat, and returns ``woken=True``.

Every write is one ``BEGIN IMMEDIATE`` transaction, which takes the file's write
lock up front: a batch of claims is one atomic compare-and-swap on the etags, so
two processes claiming the same partition never both win, and a fenced
checkpoint checks the owner and writes in the same transaction. The file is in
WAL mode and created 0600; SQLITE_BUSY is retried with the project's helpers.

Names are matched exactly (as :class:`InMemoryCheckpointStore` does). The store
also speaks the Azure SDK's dict interface, through :meth:`SqliteCheckpointStore.sdk`,
so it can be handed to ``EventHubConsumerClient`` as it is; this module imports
nothing from ``azure``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypedDict, TypeVar

import anyio
import anyio.to_thread

from durable_queue import busy_retrying, is_busy, open_private_store, transaction
from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import CheckpointStore
from replication import ConfigError, GatewayError, OwnershipLost

__all__ = ["SdkCheckpointStore", "SqliteCheckpointStore"]

T = TypeVar("T")

# "ggck" in the file header: a file that is some other SQLite database (a queue,
# a dedup store) is refused instead of having tables added to it.
_APPLICATION_ID = 0x6767636B
_KEY = "fully_qualified_namespace = ? AND eventhub_name = ? AND consumer_group = ?"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ownership (
        fully_qualified_namespace TEXT NOT NULL, eventhub_name TEXT NOT NULL,
        consumer_group TEXT NOT NULL, partition_id TEXT NOT NULL,
        owner_id TEXT NOT NULL, last_modified_time REAL NOT NULL, etag TEXT NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        fully_qualified_namespace TEXT NOT NULL, eventhub_name TEXT NOT NULL,
        consumer_group TEXT NOT NULL, partition_id TEXT NOT NULL,
        "offset" TEXT, sequence_number INTEGER,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS heartbeats (
        fully_qualified_namespace TEXT NOT NULL, eventhub_name TEXT NOT NULL,
        consumer_group TEXT NOT NULL, instance_id TEXT NOT NULL,
        last_modified_time REAL NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, instance_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS heartbeat_wakes (
        fully_qualified_namespace TEXT NOT NULL, eventhub_name TEXT NOT NULL,
        consumer_group TEXT NOT NULL, instance_id TEXT NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, instance_id)
    ) WITHOUT ROWID""",
)


def _group_key(group: ConsumerGroupRef) -> tuple[str, str, str]:
    return (group.fully_qualified_namespace, group.eventhub_name, group.consumer_group)


def _record_group(record: Ownership | Checkpoint | Heartbeat) -> tuple[str, str, str]:
    return (record.fully_qualified_namespace, record.eventhub_name, record.consumer_group)


class SqliteCheckpointStore(CheckpointStore):
    """A :class:`CheckpointStore` in a SQLite file, shared by the processes of one machine.

    The file is opened (and created, mode 0600) by the constructor. Calls run in a
    worker thread, one at a time per store.

    Args:
        path: the store file; its directory must exist.
        clock: where ``last_modified_time`` comes from. Every process sharing the
            file must use the same clock (the default, wall-clock time, is).
        busy_timeout: seconds one statement waits for another process's lock.
        lock_timeout: seconds a transaction is retried while the file stays locked,
            before :class:`~replication.GatewayError` is raised.
        read_only: inspect an existing store without changing it (SQLite's
            ``mode=ro``; what other processes wrote to its WAL is seen): a missing
            file is an error, never created, and writes raise ``GatewayError``.

    Raises:
        ConfigError: the file cannot be opened (read-only: does not exist), has a
            damaged page (checked at open, before anything is written), or is not a
            checkpoint store; the one-line message names the file and says what to do.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
        lock_timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if not busy_timeout > 0 or not lock_timeout > 0:
            raise ConfigError("busy_timeout and lock_timeout must be > 0")
        self.path = os.fspath(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._retrying = busy_retrying(lock_timeout)
        self._limiter: anyio.CapacityLimiter | None = None
        self._conn: sqlite3.Connection | None = self._open(busy_timeout, read_only)

    async def __aenter__(self) -> SqliteCheckpointStore:
        # Narrows CheckpointStore.__aenter__'s return type for `async with ... as s`.
        return self

    # -- the CheckpointStore interface ---------------------------------------------

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        return await self._call(self._list_ownership, group)

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        return await self._call(self._write, functools.partial(self._claim, list(claims)))

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        await self._call(
            self._write, functools.partial(self._put_checkpoint, checkpoint, owner_id)
        )

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        return await self._call(self._list_checkpoints, group)

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        return await self._call(self._write, functools.partial(self._beat, heartbeat))

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        return await self._call(self._list_heartbeats, group)

    supports_wake = True

    async def wake(self, heartbeats: Sequence[Heartbeat]) -> None:
        if heartbeats:
            await self._call(self._write, functools.partial(self._wake, list(heartbeats)))

    async def aclose(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def overwrite_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Write a checkpoint **without** the ownership fence.

        For the SDK adapter (whose interface has no owner to check) and for tools
        that move a stopped group's position; a running processor must use
        :meth:`update_checkpoint`.
        """
        await self._call(self._write, functools.partial(self._put_checkpoint, checkpoint, None))

    def sdk(self) -> SdkCheckpointStore:
        """This store behind the Azure SDK's ``azure.eventhub.aio.CheckpointStore`` interface.

        Returns:
            An adapter to pass as ``checkpoint_store=`` to ``EventHubConsumerClient``.
            It shares this store's file and connection; closing it is closing this store.
        """
        return SdkCheckpointStore(self)

    # -- transactions (run in the worker thread) -----------------------------------

    def _claim(self, claims: list[Ownership], conn: sqlite3.Connection) -> list[Ownership]:
        won = []
        for claim in claims:
            key = (*_record_group(claim), claim.partition_id)
            row = conn.execute(f"SELECT etag FROM ownership WHERE {_KEY} AND partition_id = ?",
                               key).fetchone()
            # The compare of the compare-and-swap: the claimer must have read the
            # record as it is now (or, with no etag, seen that there is none).
            if (None if row is None else row[0]) != claim.etag:
                continue
            record = Ownership(
                fully_qualified_namespace=claim.fully_qualified_namespace,
                eventhub_name=claim.eventhub_name,
                consumer_group=claim.consumer_group,
                partition_id=claim.partition_id,
                owner_id=claim.owner_id,
                last_modified_time=self._clock(),
                etag=uuid.uuid4().hex,
            )
            conn.execute(
                "INSERT OR REPLACE INTO ownership VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key, record.owner_id, record.last_modified_time, record.etag),
            )
            won.append(record)
        return won

    def _put_checkpoint(
        self, checkpoint: Checkpoint, owner_id: str | None, conn: sqlite3.Connection
    ) -> None:
        key = (*_record_group(checkpoint), checkpoint.partition_id)
        if owner_id is not None:
            # The fence: checked in the transaction that writes, under the write lock.
            row = conn.execute(
                f"SELECT owner_id FROM ownership WHERE {_KEY} AND partition_id = ?", key
            ).fetchone()
            if row is None or row[0] != owner_id:
                raise OwnershipLost(
                    f"{owner_id} does not own partition {checkpoint.partition_id} of "
                    f"{checkpoint.eventhub_name}; checkpoint not written"
                )
        conn.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            (*key, checkpoint.offset, checkpoint.sequence_number),
        )

    def _beat(self, heartbeat: Heartbeat, conn: sqlite3.Connection) -> Heartbeat:
        record = Heartbeat(
            fully_qualified_namespace=heartbeat.fully_qualified_namespace,
            eventhub_name=heartbeat.eventhub_name,
            consumer_group=heartbeat.consumer_group,
            instance_id=heartbeat.instance_id,
            last_modified_time=self._clock(),
        )
        key = (*_record_group(record), record.instance_id)
        conn.execute("INSERT OR REPLACE INTO heartbeats VALUES (?, ?, ?, ?, ?)",
                     (*key, record.last_modified_time))
        woken = conn.execute(f"DELETE FROM heartbeat_wakes WHERE {_KEY} AND instance_id = ?",
                             key).rowcount > 0
        return replace(record, woken=woken)

    def _wake(self, heartbeats: list[Heartbeat], conn: sqlite3.Connection) -> None:
        # Only a record that exists is woken; its time is left alone.
        for hb in heartbeats:
            conn.execute(
                "INSERT OR IGNORE INTO heartbeat_wakes SELECT fully_qualified_namespace, "
                f"eventhub_name, consumer_group, instance_id FROM heartbeats WHERE {_KEY} "
                "AND instance_id = ?", (*_record_group(hb), hb.instance_id))

    def _list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        rows = self._read(
            "SELECT partition_id, owner_id, last_modified_time, etag FROM ownership "
            f"WHERE {_KEY} ORDER BY partition_id", _group_key(group)
        )
        return [
            Ownership(
                **_fields(group), partition_id=pid, owner_id=owner,
                last_modified_time=modified, etag=etag,
            )
            for pid, owner, modified, etag in rows
        ]

    def _list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        rows = self._read(
            f'SELECT partition_id, "offset", sequence_number FROM checkpoints WHERE {_KEY} '
            "ORDER BY partition_id", _group_key(group)
        )
        return [
            Checkpoint(**_fields(group), partition_id=pid, offset=offset, sequence_number=seq)
            for pid, offset, seq in rows
        ]

    def _list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        rows = self._read(
            f"SELECT instance_id, last_modified_time FROM heartbeats WHERE {_KEY} "
            "ORDER BY instance_id", _group_key(group)
        )
        return [
            Heartbeat(**_fields(group), instance_id=instance, last_modified_time=modified)
            for instance, modified in rows
        ]

    # -- plumbing ------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:
            # One worker at a time: the connection is not shared between threads.
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(
            functools.partial(self._guarded, fn, *args), limiter=self._limiter
        )

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            if self._conn is None:
                raise RuntimeError(f"checkpoint store {self.path} is closed")
            try:
                return self._retrying(fn, *args)
            except sqlite3.DatabaseError as exc:
                raise self._map(exc) from exc

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        assert self._conn is not None
        return transaction(self._conn, body)

    def _read(self, sql: str, params: tuple[str, ...]) -> list[tuple[Any, ...]]:
        assert self._conn is not None
        return self._conn.execute(sql, params).fetchall()

    def _map(self, exc: sqlite3.DatabaseError) -> GatewayError:
        if is_busy(exc):
            return GatewayError(f"checkpoint store {self.path} stayed locked: {exc}")
        text = str(exc).lower()
        if "not a database" in text or "malformed" in text or "corrupt" in text:
            return self._corrupt(exc)
        return GatewayError(f"checkpoint store {self.path} failed: {exc}")

    def _corrupt(self, reason: object) -> ConfigError:
        return ConfigError(
            f"checkpoint store {self.path} is corrupt or unreadable ({reason}): move it aside "
            "to start with no ownership and no checkpoints"
        )

    def _open(self, busy_timeout: float, read_only: bool) -> sqlite3.Connection:
        return open_private_store(
            self.path, kind="checkpoint store", busy_timeout=busy_timeout,
            retrying=self._retrying, setup=self._identify if read_only else self._setup,
            corrupt=self._corrupt, read_only=read_only,
        )

    def _identify(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA application_id").fetchone()[0] != _APPLICATION_ID:
            raise self._corrupt("a SQLite file, but not a geogateway checkpoint store")

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")

        def create(conn: sqlite3.Connection) -> None:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id != _APPLICATION_ID and (app_id != 0 or tables):
                raise self._corrupt("a SQLite file, but not a geogateway checkpoint store")
            conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
            for statement in _SCHEMA:
                conn.execute(statement)

        transaction(conn, create)


class _GroupFields(TypedDict):
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str


def _fields(group: ConsumerGroupRef) -> _GroupFields:
    return {
        "fully_qualified_namespace": group.fully_qualified_namespace,
        "eventhub_name": group.eventhub_name,
        "consumer_group": group.consumer_group,
    }


class SdkCheckpointStore:
    """A :class:`SqliteCheckpointStore` behind the Azure SDK's dict interface.

    Duck-types ``azure.eventhub.aio.CheckpointStore`` (this module does not import
    ``azure``; register it with ``CheckpointStore.register(SdkCheckpointStore)`` if
    an ``isinstance`` check needs it). Records cross as the SDK's dicts.

    ``update_checkpoint`` is **not fenced** here: the SDK's interface has no owner
    to check against, and ``EventHubConsumerClient`` only checkpoints partitions it
    believes it owns. geogateway's own processor uses the fenced
    :meth:`SqliteCheckpointStore.update_checkpoint`.
    """

    def __init__(self, store: SqliteCheckpointStore) -> None:
        self._store = store

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Every ownership record of the group, as SDK dicts (with etag and time)."""
        group = ConsumerGroupRef(
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
        )
        return [o.to_sdk() for o in await self._store.list_ownership(group)]

    async def claim_ownership(
        self, ownership_list: Iterable[dict[str, Any]], **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Claim each ownership dict (conditional on its ``etag``); return those won."""
        claims = [Ownership.from_sdk(record) for record in ownership_list]
        return [o.to_sdk() for o in await self._store.claim_ownership(claims)]

    async def update_checkpoint(self, checkpoint: dict[str, Any], **kwargs: Any) -> None:
        """Write a checkpoint dict, unfenced (see the class docstring)."""
        await self._store.overwrite_checkpoint(Checkpoint.from_sdk(checkpoint))

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str,
        **kwargs: Any,
    ) -> list[dict[str, Any]]:
        """Every checkpoint of the group, as SDK dicts."""
        group = ConsumerGroupRef(
            fully_qualified_namespace=fully_qualified_namespace,
            eventhub_name=eventhub_name,
            consumer_group=consumer_group,
        )
        return [c.to_sdk() for c in await self._store.list_checkpoints(group)]
