"""The outbox on PostgreSQL: shared by any number of dispatchers on any number of machines.

Tables (schema ``geogateway`` by default; created by versioned migrations, component
``outbox``)::

    outbox(seq bigint identity PRIMARY KEY, entity, message_id, partition_key,
           properties, body bytea, added_at)          indexed by (entity, seq)
    outbox_dead(seq PRIMARY KEY, ..., failed_at, reason)   rows refused for good

**Adding.** ``add(conn, message)`` inserts one row through the application's own
connection, inside its transaction: the row exists when (and only if) that transaction
commits. With ``notify=True`` (the default) the same statement calls ``pg_notify``,
which PostgreSQL delivers at commit (never for a rolled-back transaction), so a waiting
dispatcher wakes at once instead of at its next poll.

**Claiming.** A dispatcher claims a destination with a transaction-level advisory lock
(``pg_try_advisory_xact_lock``, keyed by schema and entity) taken in a transaction of
its own, reads the oldest rows in the next statement (a snapshot taken after the lock,
so rows a previous holder deleted are gone), sends them, deletes them and commits,
which releases the lock. Another dispatcher's try fails instead of waiting: it takes
another destination. A dispatcher that dies (SIGKILL, a crash) closes its socket and
the server ends its transaction at once, releasing the lock and deleting nothing: the
next dispatcher sends those rows again, with the same MessageIds. One that hangs or is
cut off is ended by ``idle_in_transaction_session_timeout``, set to ``lease`` seconds
for the claim's transaction only.

Rows of one destination go out in ``seq`` order, which is the order they were added
for transactions that did not overlap; rows of overlapping transactions become
visible in the order those committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, overload

import anyio

from gateway.stores._outbox_core import (
    DeadRow,
    DestinationStats,
    MessageLike,
    OutboxClaim,
    OutboxRow,
    OutboxStats,
    check_entity_name,
    message_columns,
    row_message,
)
from gateway.stores._pg import PgTarget, migrate, open_pool, pg_errors
from replication import ConfigError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresOutbox"]

logger = logging.getLogger("geogateway")

_STEPS = [
    """
    CREATE TABLE {schema}.outbox (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        entity text NOT NULL,
        message_id text NOT NULL,
        partition_key text,
        properties text,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX outbox_by_entity ON {schema}.outbox (entity, seq);
    CREATE TABLE {schema}.outbox_dead (
        seq bigint PRIMARY KEY,
        entity text NOT NULL,
        message_id text NOT NULL,
        partition_key text,
        properties text,
        body bytea NOT NULL,
        added_at timestamptz NOT NULL,
        failed_at timestamptz NOT NULL DEFAULT now(),
        reason text NOT NULL
    );
    """,
]

_COLUMNS = "entity, message_id, partition_key, properties, body"
_LISTEN_RETRY = 5.0


class PostgresOutbox:
    """The send-side outbox in a PostgreSQL database; see the module docstring.

    Args:
        target: a DSN (``postgresql://user:password@host/db``) or a
            ``psycopg_pool.ConnectionPool`` of the application's (not closed here).
        schema: the schema of the outbox tables (created when missing).
        entity: the destination of rows added without one.
        notify: wake dispatchers with ``pg_notify`` at commit (else they poll).
        lease: seconds a dispatcher's claim may stay idle (sending) before the server
            ends it; longer than any send takes.

    Raises:
        ConfigError: the server is unreachable, refuses the credentials, has no such
            database, or holds a newer version of the tables; the message names the
            server, never the password.
    """

    #: Seconds a dispatcher waits between polls when no notification comes.
    poll_interval = 1.0

    def __init__(self, target: str | ConnectionPool[Any], *, schema: str = "geogateway",
                 entity: str | None = None, notify: bool = True, lease: float = 60.0) -> None:
        if not lease > 0:
            raise ConfigError("lease must be > 0 seconds")
        self.entity = None if entity is None else check_entity_name(entity)
        self._target: PgTarget = open_pool(target, what="outbox", schema=schema)
        try:
            migrate(self._target, "outbox", _STEPS)
        except BaseException:
            self._target.close()
            raise
        self.where = self._target.where
        self.schema = schema
        self.notify = notify
        self._lease_ms = str(int(lease * 1000))
        self._channel = f"geogateway_outbox_{schema}"[:63]
        table = f"{schema}.outbox"
        insert = f"INSERT INTO {table} ({_COLUMNS}) "
        notified = "WITH added AS ({}) SELECT pg_notify(%s, '')"
        one = insert + "VALUES (%s, %s, %s, %s, %s)"
        many = (insert + "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], "
                "%s::text[], %s::bytea[])")
        self._insert_one = notified.format(one) if notify else one
        self._insert_many = notified.format(many) if notify else many
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listener_loop: asyncio.AbstractEventLoop | None = None
        self._listen_again_at = 0.0  # while listening fails: when to try again

    def __repr__(self) -> str:
        return f"PostgresOutbox({self.where}, schema={self.schema!r})"

    # -- adding, in the application's transaction -------------------------------------

    @overload
    def add(self, conn: psycopg.AsyncConnection[Any], message: MessageLike, *,
            entity: str | None = None) -> Coroutine[Any, Any, str]: ...

    @overload
    def add(self, conn: psycopg.Connection[Any], message: MessageLike, *,
            entity: str | None = None) -> str: ...

    def add(self, conn: Any, message: MessageLike, *, entity: str | None = None) -> Any:
        """Add ``message`` for ``entity`` in the transaction open on ``conn``.

        Its MessageId is fixed now (generated when the message has none) and returned.
        The row exists once that transaction commits; a rollback removes it, and it is
        never sent. Given a ``psycopg.AsyncConnection``, returns a coroutine to await.

        Args:
            conn: the application's psycopg connection, on the outbox's database.
            message: a ``Message``, or a body (``bytes``/``str``).
            entity: the destination (default: the outbox's ``entity``).

        Raises:
            ConfigError: no destination, or the connection's database has no outbox
                table in this schema.
            psycopg.Error: the application's transaction failed (as its own
                statements would).
        """
        params = (self._entity(entity), *message_columns(message))
        if _is_async(conn):
            return self._add_async(conn, self._insert_one, params, params[1])
        self._execute(conn, self._insert_one, params)
        return params[1]

    @overload
    def add_many(self, conn: psycopg.AsyncConnection[Any], messages: Sequence[MessageLike], *,
                 entity: str | None = None) -> Coroutine[Any, Any, list[str]]: ...

    @overload
    def add_many(self, conn: psycopg.Connection[Any], messages: Sequence[MessageLike], *,
                 entity: str | None = None) -> list[str]: ...

    def add_many(self, conn: Any, messages: Sequence[MessageLike], *,
                 entity: str | None = None) -> Any:
        """Add ``messages``, in order, in one statement; see :meth:`add`. Returns their
        MessageIds."""
        target = self._entity(entity)
        columns = [message_columns(m) for m in messages]
        ids = [c[0] for c in columns]
        params = ([target] * len(columns), ids, [c[1] for c in columns],
                  [c[2] for c in columns], [c[3] for c in columns])
        if _is_async(conn):
            return self._add_async(conn, self._insert_many, params, ids)
        if columns:
            self._execute(conn, self._insert_many, params)
        return ids

    def _entity(self, entity: str | None) -> str:
        return check_entity_name(entity if entity is not None else self.entity)

    def _execute(self, conn: Any, sql: str, params: tuple[Any, ...]) -> None:
        import psycopg

        if not isinstance(conn, psycopg.Connection):
            raise TypeError("PostgresOutbox.add takes the application's psycopg Connection "
                            f"(or AsyncConnection), not {type(conn).__name__}")
        try:
            conn.execute(sql, (*params, self._channel) if self.notify else params)
        except psycopg.errors.UndefinedTable as exc:
            raise self._no_table() from exc

    async def _add_async(self, conn: Any, sql: str, params: tuple[Any, ...], ids: Any) -> Any:
        import psycopg

        if ids:
            try:
                await conn.execute(sql, (*params, self._channel) if self.notify else params)
            except psycopg.errors.UndefinedTable as exc:
                raise self._no_table() from exc
        return ids

    def _no_table(self) -> ConfigError:
        return ConfigError(f"this connection's database has no table {self.schema}.outbox: "
                           f"add through a connection to the outbox's database ({self.where})")

    # -- the dispatcher's side --------------------------------------------------------

    def destinations(self, entities: Collection[str] | None = None) -> list[str]:
        """The destinations that hold rows (of ``entities`` only, when given)."""
        table = f"{self.schema}.outbox"
        if entities is not None:
            sql = (f"SELECT e FROM unnest(%s::text[]) AS e WHERE EXISTS "
                   f"(SELECT 1 FROM {table} WHERE entity = e)")
            params: tuple[Any, ...] = (sorted(entities),)
        else:
            # A loose index scan: one index probe per destination, however many rows.
            sql = (f"WITH RECURSIVE e AS ((SELECT entity FROM {table} ORDER BY entity LIMIT 1)"
                   f" UNION ALL SELECT (SELECT o.entity FROM {table} o WHERE o.entity > "
                   f"e.entity ORDER BY o.entity LIMIT 1) FROM e WHERE e.entity IS NOT NULL)"
                   f" SELECT entity FROM e WHERE entity IS NOT NULL")
            params = ()
        return self._target.run("the outbox", lambda conn: [
            str(row[0]) for row in conn.execute(sql, params).fetchall()])

    def claim(self, entity: str, limit: int, *, owner: str) -> OutboxClaim | None:
        """Lock ``entity`` for this claim's transaction and read its oldest ``limit``
        rows; ``None`` when another dispatcher holds it or it is empty."""
        pool = self._target.pool
        with pg_errors(self.where, "the outbox"):
            conn = pool.getconn()
            try:
                got = conn.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, true), "
                    "pg_try_advisory_xact_lock(hashtext(%s), hashtext(%s))",
                    (self._lease_ms, f"geogateway-outbox:{self.schema}", entity),
                ).fetchone()
                rows = [] if not (got and got[1]) else conn.execute(
                    f"SELECT seq, message_id, partition_key, properties, body FROM "
                    f"{self.schema}.outbox WHERE entity = %s ORDER BY seq LIMIT %s",
                    (entity, limit)).fetchall()
            except BaseException:
                self._give_back(conn)
                raise
        if not rows:
            self._give_back(conn)
            return None
        return OutboxClaim(entity, tuple(
            OutboxRow(int(seq), row_message(mid, key, props, body))
            for seq, mid, key, props, body in rows), handle=conn)

    def finish(self, claim: OutboxClaim, sent: int, dead: Sequence[DeadRow] = ()) -> None:
        """Delete the first ``sent`` rows, move ``dead`` to ``outbox_dead``, commit.

        Raises:
            StoreUnavailable: the server was lost meanwhile: nothing was deleted, so the
                rows are sent again (same MessageIds).
        """
        conn = claim.handle
        table = f"{self.schema}.outbox"
        with pg_errors(self.where, "the outbox"):
            try:
                if dead:
                    conn.execute(
                        f"INSERT INTO {table}_dead (seq, {_COLUMNS}, added_at, reason) "
                        f"SELECT o.seq, o.entity, o.message_id, o.partition_key, o.properties,"
                        f" o.body, o.added_at, d.reason FROM {table} o JOIN unnest("
                        f"%s::bigint[], %s::text[]) AS d(seq, reason) ON o.seq = d.seq "
                        f"ON CONFLICT (seq) DO NOTHING",
                        ([d.seq for d in dead], [d.reason for d in dead]))
                gone = [r.seq for r in claim.rows[:sent]] + [d.seq for d in dead]
                if gone:
                    conn.execute(f"DELETE FROM {table} WHERE seq = ANY(%s)", (gone,))
                conn.commit()
            finally:
                self._give_back(conn)

    def release(self, claim: OutboxClaim) -> None:
        """Roll the claim's transaction back (the lock goes with it)."""
        self._give_back(claim.handle)

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.rollback()
        except Exception:  # a broken connection: the pool replaces it
            logger.debug("outbox: rollback on a broken connection", exc_info=True)
        self._target.pool.putconn(conn)

    async def wait(self, seconds: float) -> bool:
        """True once a notification of new rows came, False after ``seconds`` seconds
        (always, polling, when ``notify`` is off; while the listening connection is
        lost, it is tried again every few seconds)."""
        if not self.notify or time.monotonic() < self._listen_again_at:
            await anyio.sleep(seconds)
            return False
        import psycopg

        got = False
        try:
            conn = await self._listen()
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                got = True
        except psycopg.Error as exc:
            if not self._listen_again_at:
                logger.warning("outbox at %s: listening for new rows failed (%s); polling "
                               "until it works again", self.where,
                               " ".join(str(exc).split())[:200])
            self._drop_listener()
            self._listen_again_at = time.monotonic() + _LISTEN_RETRY
            await anyio.sleep(seconds)
            return False
        self._listen_again_at = 0.0
        return got

    async def _listen(self) -> psycopg.AsyncConnection[Any]:
        import psycopg

        loop = asyncio.get_running_loop()
        if self._listener is not None and self._listener_loop is not loop:
            self._drop_listener()
        if self._listener is None:
            pool = self._target.pool
            conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
            kwargs = (pool.kwargs() if callable(pool.kwargs) else pool.kwargs) or {}
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **kwargs)
            await conn.execute(f'LISTEN "{self._channel}"')
            self._listener, self._listener_loop = conn, loop
        return self._listener

    def _drop_listener(self) -> None:
        if self._listener is not None:
            self._listener.pgconn.finish()  # sync: the loop it lives on may be gone
            self._listener = None

    def stats(self) -> OutboxStats:
        """Rows waiting per destination, the oldest's age, and dead rows."""
        table = f"{self.schema}.outbox"

        def read(conn: psycopg.Connection[Any]) -> OutboxStats:
            rows = conn.execute(
                f"SELECT entity, count(*), extract(epoch FROM clock_timestamp() - "
                f"min(added_at)) FROM {table} GROUP BY entity").fetchall()
            dead = conn.execute(f"SELECT count(*) FROM {table}_dead").fetchone()
            return OutboxStats(
                destinations={str(e): DestinationStats(waiting=int(n),
                                                       oldest_age=max(0.0, float(age)))
                              for e, n, age in rows},
                dead=int(dead[0]) if dead else 0)

        return self._target.run("the outbox", read)

    def close(self) -> None:
        """Close the listening connection and the pool this store opened."""
        self._drop_listener()
        self._target.close()


def _is_async(conn: object) -> bool:
    import psycopg

    return isinstance(conn, psycopg.AsyncConnection)
