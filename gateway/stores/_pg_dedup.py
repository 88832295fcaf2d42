"""The de-duplication store and transactional inbox on PostgreSQL: one window for a fleet.

Implements :class:`replication.DedupStore` and :class:`replication.TransactionalDedupStore`
with the same window semantics as :class:`~gateway.stores.SqliteDedupStore`, for any
number of receivers on any number of machines. One table (``<schema>.dedup``)::

    message_id text PRIMARY KEY, owner text, expires float8, done_at float8 (NULL: a claim)

- **A claim asked again by its own claimant is its own** (its answer was lost: the
  connection broke after the commit): delivered, the lease renewed, instead of held
  until its lease ran out. A :class:`replication.Deduplicator` never asks again for
  an id it holds, so this is only ever that retry.
- **First writer wins in one statement.** A claim is ``INSERT ... ON CONFLICT DO UPDATE
  ... WHERE <the row is an expired claim or a done mark out of the window> RETURNING``:
  of two receivers claiming the same id at the same moment, PostgreSQL lets exactly one
  insert (or take over) the row; the other waits for that row and gets nothing back.
  The batch of a received batch is one statement and one round trip (``unnest`` of an
  array), its rows locked in id order so two batches never deadlock.
- **Done marks** of a batch are one upsert (one round trip); a failure releases the
  claim only if this owner still holds it.
- **The inbox** (:meth:`PostgresDedupStore.finish_with_effect`): the application's
  writes through the ``psycopg`` connection it is handed and the done mark commit in
  one transaction. Each call has its own pooled connection, so handlers run
  concurrently; of two copies racing, the second mark finds the first one committed,
  its transaction rolls back (its effect with it) and it returns False.
- **Pruning** is bounded: at most ``prune_batch`` rows of each kind per call, and one
  instance of the fleet at a time (a transaction-level advisory lock; the others skip).

Times are the receivers' clocks (seconds since the epoch, as the
:class:`replication.Deduplicator` passes them): keep the machines' clocks in sync (NTP);
a skew eats into the claim lease.

A broken connection, a restarted or failed-over server, a pool that cannot get a
connection: :class:`~replication.StoreUnavailable`, nothing written (receivers wait and
go on once it is back). Any other database error: :class:`~replication.GatewayError`.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.stores._pg import PgTarget, check_target, open_pool
from gateway.stores._pg_lazy import LazyTarget
from replication import (
    DEFAULT_DEDUP_WINDOW,
    ConfigError,
    DedupStore,
    DedupWindow,
    Verdict,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresDedupStore"]

T = TypeVar("T")

#: The versioned schema of the ``dedup`` component (see ``gateway.stores.migrate``).
MIGRATIONS = [
    """
    CREATE TABLE {schema}.dedup (
        message_id text PRIMARY KEY,
        owner text NOT NULL,
        expires double precision NOT NULL,
        done_at double precision
    );
    CREATE INDEX dedup_done_at ON {schema}.dedup (done_at) WHERE done_at IS NOT NULL;
    CREATE INDEX dedup_claim_expires ON {schema}.dedup (expires) WHERE done_at IS NULL;
    """,
]

_CLAIM = """
WITH ask AS (SELECT DISTINCT id FROM unnest(%(ids)s::text[]) AS id),
won AS (
    INSERT INTO {schema}.dedup AS d (message_id, owner, expires, done_at)
    SELECT id, %(owner)s, %(expires)s, NULL FROM ask ORDER BY id
    ON CONFLICT (message_id) DO UPDATE
        SET owner = EXCLUDED.owner, expires = EXCLUDED.expires, done_at = NULL
        WHERE (d.done_at IS NULL AND (d.expires <= %(now)s OR d.owner = %(owner)s))
           OR (d.done_at IS NOT NULL AND d.done_at <= %(cutoff)s)
    RETURNING d.message_id
)
SELECT message_id, true FROM won
UNION ALL
SELECT d.message_id, false FROM {schema}.dedup d JOIN ask ON d.message_id = ask.id
WHERE d.done_at > %(cutoff)s AND d.message_id NOT IN (SELECT message_id FROM won)
"""

_DONE = """
INSERT INTO {schema}.dedup AS d (message_id, owner, expires, done_at)
SELECT id, '', %(now)s, %(now)s FROM unnest(%(ids)s::text[]) AS id GROUP BY id ORDER BY id
ON CONFLICT (message_id) DO UPDATE SET owner = '', expires = EXCLUDED.expires,
    done_at = EXCLUDED.done_at
"""

_RELEASE = """
DELETE FROM {schema}.dedup
WHERE message_id = ANY(%(ids)s::text[]) AND owner = %(owner)s AND done_at IS NULL
"""

# The inbox's mark: wins only when no other copy's mark committed within the window
# (a concurrent one is waited for, then seen: this transaction then rolls back).
_INBOX_DONE = """
INSERT INTO {schema}.dedup AS d (message_id, owner, expires, done_at)
VALUES (%(id)s, '', %(now)s, %(now)s)
ON CONFLICT (message_id) DO UPDATE SET owner = '', expires = EXCLUDED.expires,
    done_at = EXCLUDED.done_at
    WHERE d.done_at IS NULL OR d.done_at <= %(cutoff)s
RETURNING 1
"""

_PEEK = """
SELECT done_at IS NOT NULL AND done_at > %(cutoff)s,
       done_at IS NULL AND expires > %(now)s
FROM {schema}.dedup WHERE message_id = %(id)s
"""

_PRUNE = [
    # done marks out of the window by time
    """DELETE FROM {schema}.dedup WHERE message_id IN (SELECT message_id FROM {schema}.dedup
       WHERE done_at IS NOT NULL AND done_at <= %(cutoff)s LIMIT %(batch)s)""",
    # claims whose lease ran out
    """DELETE FROM {schema}.dedup WHERE message_id IN (SELECT message_id FROM {schema}.dedup
       WHERE done_at IS NULL AND expires <= %(now)s LIMIT %(batch)s)""",
    # done marks past the newest `count` (walks the done_at index: O(count))
    """DELETE FROM {schema}.dedup WHERE message_id IN (SELECT message_id FROM {schema}.dedup
       WHERE done_at IS NOT NULL ORDER BY done_at DESC OFFSET %(count)s LIMIT %(batch)s)""",
]


class _Lost(Exception):
    """The inbox's mark found another copy's mark: roll the effect back."""


class PostgresDedupStore(DedupStore):
    """A :class:`replication.DedupStore` (and transactional inbox) on PostgreSQL.

    Args:
        target: a DSN (``postgresql://user:password@host:port/db``; several hosts and
            ``target_session_attrs=read-write`` for a server with a standby) or a
            ``psycopg_pool.ConnectionPool`` of the application's (not closed here).
        window: the authoritative window (see :class:`replication.DedupStore`).
        schema: where the table lives; created with its version table on first use.
        max_connections: the pool's size when this store opens it; :meth:`reserve`
            grows it for concurrent inbox handlers.
        connect_timeout: seconds to connect to the server (at start, and each attempt
            to reconnect).
        call_timeout: the longest one call takes (waiting for a connection, for the
            server's answer, for a lock; a caller's own sooner deadline wins), then
            ``StoreUnavailable``; the server's statement and lock timeouts on the
            store's connections are 90% of it.
        prune_batch: at most this many rows of each kind removed by one :meth:`prune`.
        lazy: connect (and migrate) on :meth:`open` or the first call, not here
            (receivers: their constructors do no network I/O).

    Raises:
        ConfigError: the psycopg extra is missing, a bad option or schema name, the
            server is unreachable, refuses the credentials, has no such database, the
            user may not create the tables, or they are newer than this code (with
            ``lazy``, all but the first two from :meth:`open` or the first call).
    """

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        window: DedupWindow = DEFAULT_DEDUP_WINDOW,
        schema: str = "geogateway",
        max_connections: int = 8,
        connect_timeout: float = 10.0,
        call_timeout: float = 5.0,
        prune_batch: int = 10_000,
        lazy: bool = False,
    ) -> None:
        if max_connections < 1 or prune_batch < 1:
            raise ConfigError("max_connections and prune_batch must be >= 1")
        self.window = window
        self._batch = prune_batch
        self._where = check_target(target, what="dedup store", schema=schema,
                                   connect_timeout=connect_timeout, call_timeout=call_timeout)
        self._conn = LazyTarget(functools.partial(
            open_pool, target, what="dedup store", schema=schema, max_size=max_connections,
            connect_timeout=connect_timeout, call_timeout=call_timeout),
            "dedup", MIGRATIONS, "dedup store")
        if not lazy:
            self.open()
        self._sql = {name: text.format(schema=schema) for name, text in (
            ("claim", _CLAIM), ("done", _DONE), ("release", _RELEASE),
            ("inbox_done", _INBOX_DONE), ("peek", _PEEK))}
        self._prune_sql = [text.format(schema=schema) for text in _PRUNE]
        self._lock_key = f"geogateway:{schema}.dedup:prune"

    @property
    def where(self) -> str:
        """``host:port/database as user`` (never the password)."""
        if self._conn.closed:
            raise RuntimeError("the dedup store is closed")
        return self._where

    def __repr__(self) -> str:
        return f"PostgresDedupStore({'closed' if self._conn.closed else self._where!r})"

    def open(self) -> None:
        """Connect and bring the tables up to date, unless done already (blocking: call
        it from a worker thread in async code); the first call of a lazy store does it.

        Raises:
            ConfigError: as the constructor's (the server's answer).
            RuntimeError: the store is closed.
        """
        self._conn.open()

    # -- connections ------------------------------------------------------------------

    def _live(self) -> PgTarget:
        return self._conn.open()

    def _connection(self, what: str, deadline: float, *, watch: bool = True
                    ) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        return self._live().checked(what, deadline, watch=watch)

    def _statement(self, what: str, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """One statement in autocommit (atomic by itself): one round trip, no BEGIN."""

        def attempt(deadline: float) -> list[tuple[Any, ...]]:
            with self._connection(what, deadline) as conn:
                was = conn.autocommit
                conn.autocommit = True
                try:
                    cursor = conn.execute(sql, params)
                    return cursor.fetchall() if cursor.description else []
                finally:
                    if not conn.broken and not conn.closed:
                        conn.autocommit = was

        return self._live().retried(attempt)

    def reserve(self, handlers: int) -> None:
        """Make room for ``handlers`` inbox transactions at once, plus the claims and
        marks beside them: a pool opened here grows to ``handlers + 2``.

        Raises:
            ConfigError: the application's pool is smaller than that (give it a
                ``max_size`` of at least ``handlers + 2``, or run fewer handlers).
        """
        target = self._live()
        need = handlers + 2
        if target.pool.max_size >= need:
            return
        if not target.owned:
            raise ConfigError(
                f"the connection pool given as dedup store has max_size "
                f"{target.pool.max_size}; {handlers} concurrent handlers need {need}")
        target.pool.resize(target.pool.min_size, need)

    # -- the window -------------------------------------------------------------------

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        """See :meth:`replication.DedupStore.claim`; one statement for the batch."""
        if not message_ids:
            return []
        rows = self._statement("claim", self._sql["claim"], {
            "ids": list(message_ids), "owner": owner, "expires": now + lease, "now": now,
            "cutoff": now - self.window.seconds})
        won = {mid for mid, claimed in rows if claimed}
        done = {mid for mid, claimed in rows if not claimed}
        verdicts: list[Verdict] = []
        for message_id in message_ids:
            if message_id in won:
                won.discard(message_id)  # a repeat later in this batch is HOLD
                verdicts.append(Verdict.DELIVER)
            elif message_id in done:
                verdicts.append(Verdict.DUPLICATE)
            else:
                # Held here or elsewhere, or changed by a transaction that committed
                # during this statement: HOLD is always safe, it is asked again.
                verdicts.append(Verdict.HOLD)
        return verdicts

    def finish(self, message_id: str, *, owner: str, succeeded: bool, now: float) -> None:
        """See :meth:`replication.DedupStore.finish`."""
        self.finish_many([message_id], owner=owner, succeeded=succeeded, now=now)

    def finish_many(
        self, message_ids: Sequence[str], *, owner: str, succeeded: bool, now: float
    ) -> None:
        """See :meth:`replication.DedupStore.finish_many`; one statement."""
        if not message_ids:
            return
        if succeeded:
            self._statement("mark done", self._sql["done"], {"ids": list(message_ids),
                                                             "now": now})
        else:
            self._statement("release", self._sql["release"], {"ids": list(message_ids),
                                                              "owner": owner})

    def finish_with_effect(
        self,
        message_id: str,
        *,
        owner: str,
        now: float,
        effect: Callable[[psycopg.Connection[Any]], None] | Callable[[Any], None],
    ) -> bool:
        """The transactional inbox: ``effect(conn)`` and the done mark in ONE transaction.

        On a pooled connection of its own: if ``message_id`` is already done within
        the window, nothing is run (False); otherwise ``effect(conn)`` runs (the
        application's writes, through ``conn``, into its tables in this database), then
        the id is marked done at ``now``, ending the claim. When another copy's mark
        committed meanwhile (the two raced), this transaction rolls back, the effect's
        writes with it, and the answer is False: exactly one effect commits. If
        ``effect`` raises, nothing is kept and the exception propagates (the claim is
        kept; release it with ``finish(..., succeeded=False)``).

        ``effect`` must act only through ``conn`` and must not commit, roll back or
        close it; it may run again when the connection broke and the transaction is
        retried on a new one. It must end within ``call_timeout`` (its connection is
        broken then: a server that stopped answering does not hold it for ever). Calls
        run concurrently, each on its own connection.

        Raises:
            StoreUnavailable: the connection broke or none could be had; nothing kept.
            GatewayError: PostgreSQL refused a statement (including one of ``effect``'s,
                e.g. a constraint violation); nothing kept.
            ConfigError: ``effect`` ended the transaction itself.
        """
        from psycopg.pq import TransactionStatus

        params = {"id": message_id, "now": now, "cutoff": now - self.window.seconds}

        def attempt(deadline: float) -> bool:
            # The store's statements are watched within the call's deadline; the
            # application's effect gets a call_timeout of its own from its start (a
            # frozen server must not hold it for ever either).
            target = self._live()
            with self._connection("the inbox", deadline, watch=False) as conn:
                with target.watched(conn, deadline):
                    row = conn.execute(self._sql["peek"], params).fetchone()
                if row is not None and row[0]:
                    conn.rollback()
                    return False
                with target.watched(conn, time.monotonic() + target.call_timeout):
                    effect(conn)
                if conn.info.transaction_status != TransactionStatus.INTRANS:
                    raise ConfigError("the effect of finish_with_effect must not commit or "
                                      "roll back the store's transaction")
                with target.watched(conn, time.monotonic() + target.call_timeout):
                    if conn.execute(self._sql["inbox_done"], params).fetchone() is None:
                        raise _Lost  # rolled back as the connection goes back
                    conn.commit()
                return True

        try:
            return self._live().retried(attempt)
        except _Lost:
            return False

    def peek(self, message_id: str, *, now: float) -> Verdict:
        """See :meth:`replication.DedupStore.peek`; reads only."""
        rows = self._statement("peek", self._sql["peek"], {
            "id": message_id, "now": now, "cutoff": now - self.window.seconds})
        if rows and rows[0][0]:
            return Verdict.DUPLICATE
        return Verdict.HOLD if rows and rows[0][1] else Verdict.DELIVER

    def prune(self, *, now: float, window: DedupWindow) -> int:
        """See :meth:`replication.DedupStore.prune`; one transaction, at most
        ``prune_batch`` rows of each kind, skipped (0) while another instance prunes.

        The count bound walks the newest ``window.count`` entries of the ``done_at``
        index, which is why :class:`replication.Deduplicator` prunes only now and then.
        """
        params = {"cutoff": now - window.seconds, "now": now, "count": window.count,
                  "batch": self._batch}

        def attempt(deadline: float) -> int:
            with self._connection("prune", deadline) as conn, conn.transaction():
                locked = conn.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))",
                                      (self._lock_key,)).fetchone()
                if not (locked and locked[0]):
                    return 0
                return sum(max(0, conn.execute(sql, params).rowcount)
                           for sql in self._prune_sql)

        return self._live().retried(attempt)

    def ping(self) -> None:
        """One round trip to the server.

        Raises:
            StoreUnavailable: it cannot be reached now.
        """
        self._statement("ping", "SELECT 1", {})

    def close(self) -> None:
        """Close the pool if this store opened it; idempotent."""
        self._conn.close()
