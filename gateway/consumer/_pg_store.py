"""The PostgreSQL checkpoint store: ownership and checkpoints shared by a fleet.

The same contract as :class:`~gateway.consumer.SqliteCheckpointStore` (one machine)
and :class:`~gateway.consumer.BlobCheckpointStore` (Azure Blob Storage), on one
database that any number of machines reach. Four tables in the store's schema,
keyed like the Azure SDK's records, created by the versioned migrations of
:mod:`gateway.stores` (component ``consumer``)::

    consumer_ownership(namespace, eventhub, consumer_group, partition_id) -> owner_id, etag, time
    consumer_checkpoints(namespace, eventhub, consumer_group, partition_id) -> offset, sequence
    consumer_heartbeats(namespace, eventhub, consumer_group, instance_id) -> time
    consumer_wakes(namespace, eventhub, consumer_group, instance_id)

Every claim is one statement, fenced by its etag: a new record is an ``INSERT ...
ON CONFLICT DO NOTHING`` (it loses to any record, including one a concurrent claimer
is inserting: the unique key makes it wait for that one), a takeover an ``UPDATE
... WHERE etag = <the etag read>`` (a concurrent takeover of the same record waits
on its row lock, then finds the etag changed). A batch of claims is one transaction,
its statements in key order (two instances claiming overlapping batches never wait
on each other in a cycle).

A fenced checkpoint is one statement too: it locks the ownership row (``FOR SHARE``)
and writes only if the writer still owns the partition. A takeover waits for that
lock, and a checkpoint waiting for a takeover's lock sees the new owner once it has
it, so a stale owner never writes after its partition was taken over: it cannot
move a checkpoint backwards.

A wake is a row in ``consumer_wakes`` (for an instance that has a heartbeat); the
instance's next heartbeat deletes it, in the statement that writes the heartbeat,
and returns ``woken=True``.

Times: the database server's clock by default (one clock for the whole fleet,
as Blob Storage's ``Last-Modified``), or ``clock`` when one is given (tests).
Errors: a lost server is :class:`~replication.StoreUnavailable` from the call that
met it (the pool reconnects by itself once the server is back), and the processor
reports it to ``on_error`` and retries; see :mod:`gateway.stores` for the rest.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import anyio
import anyio.to_thread

from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import CheckpointStore
from gateway.stores import PgTarget, StoreOutages, migrate, open_pool, store_deadline
from replication import ConfigError, OwnershipLost, StoreUnavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresCheckpointStore"]

T = TypeVar("T")

_GROUP = "fully_qualified_namespace, eventhub_name, consumer_group"
_KEY = "fully_qualified_namespace = %s AND eventhub_name = %s AND consumer_group = %s"
_NOW = "COALESCE(%s::float8, extract(epoch FROM clock_timestamp())::float8)"

_STEPS = [
    """CREATE TABLE {schema}.consumer_ownership (
        fully_qualified_namespace text NOT NULL, eventhub_name text NOT NULL,
        consumer_group text NOT NULL, partition_id text NOT NULL,
        owner_id text NOT NULL, last_modified_time double precision NOT NULL,
        etag text NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
    )""",
    """CREATE TABLE {schema}.consumer_checkpoints (
        fully_qualified_namespace text NOT NULL, eventhub_name text NOT NULL,
        consumer_group text NOT NULL, partition_id text NOT NULL,
        "offset" text, sequence_number bigint,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, partition_id)
    )""",
    """CREATE TABLE {schema}.consumer_heartbeats (
        fully_qualified_namespace text NOT NULL, eventhub_name text NOT NULL,
        consumer_group text NOT NULL, instance_id text NOT NULL,
        last_modified_time double precision NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, instance_id)
    )""",
    """CREATE TABLE {schema}.consumer_wakes (
        fully_qualified_namespace text NOT NULL, eventhub_name text NOT NULL,
        consumer_group text NOT NULL, instance_id text NOT NULL,
        PRIMARY KEY (fully_qualified_namespace, eventhub_name, consumer_group, instance_id)
    )""",
]


def _group_key(group: ConsumerGroupRef) -> tuple[str, str, str]:
    return (group.fully_qualified_namespace, group.eventhub_name, group.consumer_group)


class _GroupFields(TypedDict):
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str


def _fields(group: ConsumerGroupRef) -> _GroupFields:
    return {"fully_qualified_namespace": group.fully_qualified_namespace,
            "eventhub_name": group.eventhub_name, "consumer_group": group.consumer_group}


class PostgresCheckpointStore(CheckpointStore):
    """A :class:`CheckpointStore` on PostgreSQL (see the module doc).

    Args:
        target: a DSN (``postgresql://user:password@host:port/database``; several
            hosts with ``target_session_attrs=read-write`` follow a failover of the
            server) or a ``psycopg_pool.ConnectionPool`` the application owns (left
            open by :meth:`aclose`).
        schema: the schema of the tables (created when missing, unless ``read_only``).
        clock: where record times come from; default the server's clock.
        read_only: inspect an existing store: nothing is created, every transaction
            is ``READ ONLY`` (a write raises ``GatewayError``).
        connect_timeout: seconds to connect to the server (at start, and each attempt
            to reconnect).
        call_timeout: the longest one call takes (waiting for a connection, for the
            server's answer, for a lock; a caller's own sooner deadline wins), then
            ``StoreUnavailable``; the server's statement and lock timeouts on the
            store's connections are 90% of it.
        max_connections: the pool's size, when the store opens it.

    Raises:
        ConfigError: the server is unreachable, refuses the credentials, has no such
            database or holds a newer schema; with ``read_only``, there is no store
            in the schema; psycopg is missing.
    """

    supports_wake = True

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        schema: str = "geogateway",
        clock: Callable[[], float] | None = None,
        read_only: bool = False,
        connect_timeout: float = 10.0,
        call_timeout: float = 5.0,
        max_connections: int = 4,
    ) -> None:
        self._clock = clock
        self._read_only = read_only
        self._own = f"{schema}.consumer_ownership"
        self._marks = f"{schema}.consumer_checkpoints"
        self._beats = f"{schema}.consumer_heartbeats"
        self._wakes = f"{schema}.consumer_wakes"
        self._target: PgTarget | None = open_pool(
            target, what="checkpoint store", schema=schema, max_size=max_connections,
            connect_timeout=connect_timeout, call_timeout=call_timeout)
        self.where = self._target.where
        #: The store's outages: one warning when it goes away, one when it is back
        #: (``outages.listen`` to hear of both; ``outages.count`` of them).
        self.outages = StoreOutages(
            f"checkpoint store at {self.where}",
            meanwhile="partitions are kept while their heartbeat is valid; checkpoints "
                      "and claims wait until it is back")
        try:
            if read_only:
                self._check_exists(self._target)
            else:
                migrate(self._target, "consumer", _STEPS)
        except BaseException:
            self._target.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresCheckpointStore({self.where!r}, schema={self._own.split('.')[0]!r})"

    async def __aenter__(self) -> PostgresCheckpointStore:
        return self

    # -- the CheckpointStore interface ---------------------------------------------

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        return await self._call("list ownership", functools.partial(self._list_ownership, group))

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        return await self._call("claim ownership", functools.partial(self._claim, list(claims)))

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        await self._call("update a checkpoint",
                         functools.partial(self._put_checkpoint, checkpoint, owner_id))

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        return await self._call("list checkpoints",
                                functools.partial(self._list_checkpoints, group))

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        return await self._call("write a heartbeat", functools.partial(self._beat, heartbeat))

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        return await self._call("list heartbeats",
                                functools.partial(self._list_heartbeats, group))

    async def wake(self, heartbeats: Sequence[Heartbeat]) -> None:
        if heartbeats:
            await self._call("wake instances", functools.partial(self._wake, list(heartbeats)))

    async def aclose(self) -> None:
        target, self._target = self._target, None
        if target is not None:
            await anyio.to_thread.run_sync(target.close)

    # -- transactions (in a worker thread, on a pooled connection) ----------------------

    def _claim(self, claims: list[Ownership], conn: psycopg.Connection[Any]) -> list[Ownership]:
        # Key order (stable: the first claim of a partition in the batch goes first),
        # all statements sent at once (one round trip), run in order by the server.
        order = sorted(range(len(claims)), key=lambda i: (
            *_group_key(claims[i].group), claims[i].partition_id))
        etags = {i: uuid.uuid4().hex for i in order}
        with conn.pipeline():
            cursors = {i: self._claim_one(claims[i], etags[i], conn) for i in order}
        won = []
        for i in sorted(order):
            row = cursors[i].fetchone()
            if row is not None:
                claim = claims[i]
                won.append(Ownership(**_fields(claim.group), partition_id=claim.partition_id,
                                     owner_id=claim.owner_id,
                                     last_modified_time=float(row[0]), etag=etags[i]))
        return won

    def _claim_one(self, claim: Ownership, etag: str,
                   conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        key = (*_group_key(claim.group), claim.partition_id)
        if claim.etag is None:
            return conn.execute(
                f"INSERT INTO {self._own} ({_GROUP}, partition_id, owner_id, "
                f"last_modified_time, etag) VALUES (%s, %s, %s, %s, %s, {_NOW}, %s) "
                "ON CONFLICT DO NOTHING RETURNING last_modified_time",
                (*key, claim.owner_id, self._now(), etag))
        return conn.execute(
            f"UPDATE {self._own} SET owner_id = %s, last_modified_time = {_NOW}, "
            f"etag = %s WHERE {_KEY} AND partition_id = %s AND etag = %s "
            "RETURNING last_modified_time",
            (claim.owner_id, self._now(), etag, *key, claim.etag))

    def _put_checkpoint(self, checkpoint: Checkpoint, owner_id: str,
                        conn: psycopg.Connection[Any]) -> None:
        group = ConsumerGroupRef(fully_qualified_namespace=checkpoint.fully_qualified_namespace,
                                 eventhub_name=checkpoint.eventhub_name,
                                 consumer_group=checkpoint.consumer_group)
        key = (*_group_key(group), checkpoint.partition_id)
        # The fence and the write in one statement: the ownership row is locked
        # (FOR SHARE) and re-checked after any takeover in progress commits.
        row = conn.execute(
            f"WITH owner AS (SELECT 1 FROM {self._own} WHERE {_KEY} AND partition_id = %s "
            "AND owner_id = %s FOR SHARE) "
            f'INSERT INTO {self._marks} ({_GROUP}, partition_id, "offset", sequence_number) '
            "SELECT %s, %s, %s, %s, %s, %s FROM owner "
            f"ON CONFLICT ({_GROUP}, partition_id) DO UPDATE SET "
            '"offset" = EXCLUDED."offset", sequence_number = EXCLUDED.sequence_number '
            "RETURNING 1",
            (*key, owner_id, *key, checkpoint.offset, checkpoint.sequence_number)).fetchone()
        if row is None:
            raise OwnershipLost(
                f"{owner_id} does not own partition {checkpoint.partition_id} of "
                f"{checkpoint.eventhub_name}; checkpoint not written")

    def _beat(self, heartbeat: Heartbeat, conn: psycopg.Connection[Any]) -> Heartbeat:
        key = (*_group_key(heartbeat.group), heartbeat.instance_id)
        # The wake is taken in the statement that writes the heartbeat; one that
        # commits meanwhile stays for the next heartbeat (never lost).
        row = conn.execute(
            f"WITH woken AS (DELETE FROM {self._wakes} WHERE {_KEY} AND instance_id = %s "
            f"RETURNING 1) INSERT INTO {self._beats} ({_GROUP}, instance_id, "
            f"last_modified_time) VALUES (%s, %s, %s, %s, {_NOW}) "
            f"ON CONFLICT ({_GROUP}, instance_id) DO UPDATE SET "
            "last_modified_time = EXCLUDED.last_modified_time "
            "RETURNING last_modified_time, EXISTS (SELECT 1 FROM woken)",
            (*key, *key, self._now())).fetchone()
        assert row is not None
        return Heartbeat(**_fields(heartbeat.group), instance_id=heartbeat.instance_id,
                         last_modified_time=float(row[0]), woken=bool(row[1]))

    def _wake(self, heartbeats: list[Heartbeat], conn: psycopg.Connection[Any]) -> None:
        # Only a record that exists is woken; its time is left alone.
        by_group: dict[tuple[str, str, str], list[str]] = {}
        for hb in heartbeats:
            by_group.setdefault(_group_key(hb.group), []).append(hb.instance_id)
        for group, ids in sorted(by_group.items()):
            conn.execute(f"INSERT INTO {self._wakes} SELECT {_GROUP}, instance_id FROM "
                         f"{self._beats} WHERE {_KEY} AND instance_id = ANY(%s) "
                         "ON CONFLICT DO NOTHING", (*group, sorted(ids)))

    def _list_ownership(self, group: ConsumerGroupRef,
                        conn: psycopg.Connection[Any]) -> list[Ownership]:
        rows = conn.execute(
            f"SELECT partition_id, owner_id, last_modified_time, etag FROM {self._own} "
            f"WHERE {_KEY} ORDER BY partition_id", _group_key(group)).fetchall()
        return [Ownership(**_fields(group), partition_id=pid, owner_id=owner,
                          last_modified_time=float(modified), etag=etag)
                for pid, owner, modified, etag in rows]

    def _list_checkpoints(self, group: ConsumerGroupRef,
                          conn: psycopg.Connection[Any]) -> list[Checkpoint]:
        rows = conn.execute(
            f'SELECT partition_id, "offset", sequence_number FROM {self._marks} '
            f"WHERE {_KEY} ORDER BY partition_id", _group_key(group)).fetchall()
        return [Checkpoint(**_fields(group), partition_id=pid, offset=offset,
                           sequence_number=None if seq is None else int(seq))
                for pid, offset, seq in rows]

    def _list_heartbeats(self, group: ConsumerGroupRef,
                         conn: psycopg.Connection[Any]) -> list[Heartbeat]:
        rows = conn.execute(
            f"SELECT instance_id, last_modified_time FROM {self._beats} "
            f"WHERE {_KEY} ORDER BY instance_id", _group_key(group)).fetchall()
        return [Heartbeat(**_fields(group), instance_id=instance,
                          last_modified_time=float(modified)) for instance, modified in rows]

    # -- plumbing ----------------------------------------------------------------------

    def _now(self) -> float | None:
        return None if self._clock is None else float(self._clock())

    async def _call(self, what: str, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        target = self._target
        if target is None:
            raise RuntimeError(f"checkpoint store {self.where} is closed")
        if self._read_only:
            body = functools.partial(_read_only, body)
        # The caller's deadline (the processor's, or the balancing loop's) bounds the
        # call in its worker thread too: a frozen server breaks the connection then,
        # rather than holding the thread and its connection. Abandoned when the caller
        # gives up: the thread finishes on its own, returning its connection.
        left = anyio.current_effective_deadline() - anyio.current_time()
        # A little inside it, so that the caller hears StoreUnavailable (the store is
        # away) rather than its own timeout (a store that hangs).
        left -= min(0.1, left / 10)
        try:
            with store_deadline(left):
                result = await anyio.to_thread.run_sync(
                    functools.partial(target.run, f"checkpoint store: {what}", body),
                    abandon_on_cancel=True)
        except StoreUnavailable as exc:
            self.outages.failed(what, exc)
            raise
        self.outages.answered()
        return result

    def _check_exists(self, target: PgTarget) -> None:
        def body(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(
                "SELECT to_regclass(%s), to_regclass(%s), to_regclass(%s), to_regclass(%s)",
                (self._own, self._marks, self._beats, self._wakes)).fetchone()

        found = target.run("checkpoint store: open", body)
        if found is None or None in found:
            raise ConfigError(f"no checkpoint store in schema {target.schema!r} at "
                              f"{target.where}: check the DSN and the schema")


def _read_only(body: Callable[[psycopg.Connection[Any]], T], conn: psycopg.Connection[Any]) -> T:
    conn.execute("SET TRANSACTION READ ONLY")
    return body(conn)
