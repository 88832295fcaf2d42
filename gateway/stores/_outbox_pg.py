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

**Claiming.** A dispatcher claims a destination with a session-level advisory lock
(``pg_try_advisory_lock``, keyed by schema and entity) on a pooled connection of its
own, and reads the oldest rows in the next statement (a snapshot taken after the lock,
so rows a previous holder deleted are gone). It sends them, deletes them and commits,
batch after batch (each delete committed while the next batch is sent), then unlocks
and gives the connection back. Another dispatcher's try fails instead of waiting: it
takes another destination. A dispatcher that dies (SIGKILL, a crash) closes its socket
and the server ends its session at once, releasing the lock and rolling back the
delete in progress: the next dispatcher sends those rows again, with the same
MessageIds. One that hangs or is cut off is ended by
``idle_in_transaction_session_timeout`` (``lease`` seconds, set for the claim's own
transactions, which stay open while their rows are sent). The claim's commits do not
wait for the server's disk (``synchronous_commit`` off, for them only): a delete lost
in a crash of the server only sends its rows again.

Rows of one destination go out in ``seq`` order, which is the order they were added
for transactions that did not overlap; rows of overlapping transactions become
visible in the order those committed.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import anyio

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
from gateway.stores._outbox_pg_listen import Listener
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


@dataclass(eq=False)
class _Session:
    """A claim's pooled connection, the destination it locked, and whether it ended."""

    conn: psycopg.Connection[Any]
    entity: str
    locked: bool = False
    ended: bool = False


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
        # A claim's session settings (reset when it ends): its idle limit in a
        # transaction (the lease), and commits that need not wait for the disk (a delete
        # lost in a crash only sends its rows again). The lock is the session's too, held
        # across the transactions of a claim.
        self._settings_sql = ("SELECT set_config('idle_in_transaction_session_timeout', %s,"
                              " false), set_config('synchronous_commit', 'off', false)")
        self._reset_sql = ("RESET idle_in_transaction_session_timeout; "
                           "RESET synchronous_commit")
        self._lock_sql = "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))"
        self._unlock_sql = "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))"
        self._lock_key = f"geogateway-outbox:{schema}"
        self._read_sql = (f"SELECT seq, message_id, partition_key, properties, body FROM "
                          f"{table} WHERE entity = %s AND seq > %s ORDER BY seq LIMIT %s")
        self._delete_sql = f"DELETE FROM {table} WHERE seq = ANY(%s)"
        self._dead_sql = (
            f"INSERT INTO {table}_dead (seq, {_COLUMNS}, added_at, reason) SELECT o.seq, "
            f"o.entity, o.message_id, o.partition_key, o.properties, o.body, o.added_at, "
            f"d.reason FROM {table} o JOIN unnest(%s::bigint[], %s::text[]) AS d(seq, reason)"
            f" ON o.seq = d.seq ON CONFLICT (seq) DO NOTHING")
        self._listener = (Listener(self._target.pool, self._channel, self.where)
                          if notify else None)

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
        """Lock ``entity`` (a session lock of a pooled connection) and read its oldest
        ``limit`` rows; ``None`` when another dispatcher holds it or it is empty."""
        with pg_errors(self.where, "the outbox"):
            session = _Session(self._target.pool.getconn(), entity)
            conn = session.conn
            try:
                # One round trip: the settings, the lock, then the read, whose snapshot
                # is taken after the lock (rows the previous holder deleted are gone).
                with conn.pipeline():
                    conn.execute(self._settings_sql, (self._lease_ms,))
                    lock = conn.execute(self._lock_sql, (self._lock_key, entity))
                    read = conn.cursor(binary=True).execute(
                        self._read_sql, (entity, -1, limit))
                got = lock.fetchone()
                session.locked = bool(got and got[0])
                claim = self._claim(session, read.fetchall() if session.locked else [])
            except BaseException:
                self._end(session)
                raise
        if claim is None:
            self._end(session)
        return claim

    def read_ahead(self, claim: OutboxClaim, limit: int) -> OutboxClaim | None:
        """The next ``limit`` rows after ``claim``'s, under the same lock."""
        session: _Session = claim.handle
        with pg_errors(self.where, "the outbox"):
            try:
                rows = session.conn.cursor(binary=True).execute(
                    self._read_sql, (claim.entity, claim.rows[-1].seq, limit)).fetchall()
            except BaseException:
                self._end(session)
                raise
        return self._claim(session, rows)

    def finish(self, claim: OutboxClaim, sent: int, dead: Sequence[DeadRow] = (), *,
               keep: bool = False) -> None:
        """Delete the first ``sent`` rows, move ``dead`` to ``outbox_dead``, commit; then
        unlock, or with ``keep`` go on holding the lock (for the rows read ahead).

        Raises:
            StoreUnavailable: the server was lost meanwhile: nothing was deleted, so the
                rows are sent again (same MessageIds); the claim has ended.
        """
        session: _Session = claim.handle
        conn = session.conn
        gone = [r.seq for r in claim.rows[:sent]] + [d.seq for d in dead]
        with pg_errors(self.where, "the outbox"):
            try:
                with conn.pipeline():
                    if dead:
                        conn.execute(self._dead_sql, ([d.seq for d in dead],
                                                      [d.reason for d in dead]))
                    if gone:
                        conn.execute(self._delete_sql, (gone,))
                    conn.commit()
            except BaseException:
                self._end(session)
                raise
        if not keep:
            self._end(session)

    def release(self, claim: OutboxClaim) -> None:
        """Roll back and unlock: the claim's rows stay as they were."""
        self._end(claim.handle)

    def _claim(self, session: _Session, rows: list[Any]) -> OutboxClaim | None:
        if not rows:
            return None
        return OutboxClaim(session.entity, claimed_rows(rows), handle=session)

    def _end(self, session: _Session) -> None:
        """Roll back, unlock, give the connection back (once); one whose state is
        unsure is closed instead (its session's lock ends with it)."""
        if session.ended:
            return
        session.ended = True
        conn = session.conn
        try:
            conn.rollback()
            with conn.pipeline():
                if session.locked:
                    conn.execute(self._unlock_sql, (self._lock_key, session.entity))
                for statement in self._reset_sql.split("; "):
                    conn.execute(statement)
                conn.commit()
        except Exception:
            logger.debug("outbox: closing a connection that could not be reset", exc_info=True)
            conn.close()
        self._target.pool.putconn(conn)

    async def wait(self, seconds: float) -> bool:
        """True once a notification of new rows came, False after ``seconds`` seconds
        (always, polling, when ``notify`` is off; see :mod:`._outbox_pg_listen`)."""
        if self._listener is None:
            await anyio.sleep(seconds)
            return False
        return await self._listener.wait(seconds)

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
        if self._listener is not None:
            self._listener.close()
        self._target.close()


def _is_async(conn: object) -> bool:
    import psycopg

    return isinstance(conn, psycopg.AsyncConnection)
