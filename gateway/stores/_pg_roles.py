"""Role state on PostgreSQL: one row per primary/secondary pair, shared by a fleet.

Every sender of the fleet configured with the same pair reads and writes the same
row, so they agree on which namespace is active. A role change is a compare-and-swap
on the row's ``generation`` (the version column): a sender swaps only from the state
it last read, in one statement; a sender whose view is stale (another one changed
the roles since) gets the stored state back instead, and adopts it. Two senders
failing over at once therefore make one change, never two that undo each other,
and a late writer never rolls the roles back to an older generation.

The table (``<schema>.sender_roles``, created by the versioned migrations of
:mod:`gateway.stores._pg`, component ``roles``)::

    sender_roles(preferred, standby_preferred) -> active, generation, changed_at, updated_at
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.stores._pg import check_target, open_pool
from gateway.stores._pg_lazy import LazyTarget
from replication import ConfigError, RoleState

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresRoleStore"]

T = TypeVar("T")

_STEPS = [
    """CREATE TABLE {schema}.sender_roles (
        preferred text NOT NULL,
        standby_preferred text NOT NULL,
        active text NOT NULL,
        generation bigint NOT NULL,
        changed_at double precision NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (preferred, standby_preferred)
    )""",
]

_COLUMNS = "active, generation, changed_at"


class PostgresRoleStore:
    """Role state of primary/secondary pairs in a PostgreSQL table (see the module doc).

    Args:
        target: a DSN (``postgresql://user:password@host:port/db``) or a
            ``psycopg_pool.ConnectionPool`` the application owns (not closed here).
        schema: the schema of the table (created if missing).
        refresh_interval: how often (seconds) a sender reads the row again to learn
            of changes made by other senders (its background recovery rounds do).
        connect_timeout: seconds to connect to the server (at start, and each attempt
            to reconnect).
        call_timeout: the longest one call takes (waiting for a connection, for the
            server's answer, for a lock; a caller's own sooner deadline wins), then
            ``StoreUnavailable``; the server's statement and lock timeouts on the
            store's connections are 90% of it.
        lazy: connect (and migrate) on :meth:`open` or the first call, not here
            (senders: their constructors do no network I/O).

    Raises:
        ConfigError: the server is unreachable, refuses the credentials, has no such
            database, or holds a newer schema (with ``lazy``: from :meth:`open` or the
            first call); a bad schema name; psycopg missing.
    """

    def __init__(
        self,
        target: str | ConnectionPool[Any],
        *,
        schema: str = "geogateway",
        refresh_interval: float = 1.0,
        connect_timeout: float = 10.0,
        call_timeout: float = 5.0,
        lazy: bool = False,
    ) -> None:
        if not refresh_interval > 0:
            raise ConfigError("refresh_interval must be > 0 seconds")
        self.refresh_interval = float(refresh_interval)
        self.where = check_target(target, what="roles store", schema=schema,
                                  connect_timeout=connect_timeout, call_timeout=call_timeout)
        self._conn = LazyTarget(functools.partial(
            open_pool, target, what="roles store", schema=schema, max_size=2,
            connect_timeout=connect_timeout, call_timeout=call_timeout),
            "roles", _STEPS, "roles store")
        self._table = f"{schema}.sender_roles"
        if not lazy:
            self.open()

    def open(self) -> None:
        """Connect and bring the table up to date, unless done already (blocking: call
        it from a worker thread in async code); the first call of a lazy store does it.

        Raises:
            ConfigError: as the constructor's (the server's answer).
            RuntimeError: the store is closed.
        """
        self._conn.open()

    #: Other processes write the same state: senders re-read it (``refresh_interval``).
    shared = True

    def __repr__(self) -> str:
        return f"PostgresRoleStore({self.where!r}, table={self._table!r})"

    def load(self, primary: str, secondary: str) -> RoleState:
        """The stored state for this pair, or the initial one (primary active).

        Raises:
            StoreUnavailable: the server cannot be reached now.
        """
        def body(conn: psycopg.Connection[Any]) -> RoleState:
            return self._read(conn, primary, secondary)

        return self._run("load the roles", body)

    def save(self, state: RoleState) -> None:
        """Write ``state`` unconditionally (an operator's override; senders use
        :meth:`swap`)."""
        def body(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                f"INSERT INTO {self._table} (preferred, standby_preferred, {_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (preferred, standby_preferred) DO "
                "UPDATE SET active = EXCLUDED.active, generation = EXCLUDED.generation, "
                "changed_at = EXCLUDED.changed_at, updated_at = now()",
                _row(state))

        self._run("save the roles", body)

    def swap(self, expected: RoleState, new: RoleState) -> RoleState:
        """Store ``new`` if the stored state is still ``expected`` (same generation);
        return the state in force afterwards: ``new`` when it was stored, otherwise
        what another sender stored meanwhile (adopt it, do not retry the change).

        Raises:
            StoreUnavailable: the server cannot be reached now (nothing was written).
        """
        def body(conn: psycopg.Connection[Any]) -> RoleState:
            # A missing row is the initial state, generation 0: the first change
            # inserts it; a concurrent first change meets the row and its generation.
            won = conn.execute(
                f"INSERT INTO {self._table} AS r (preferred, standby_preferred, {_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (preferred, standby_preferred) DO "
                "UPDATE SET active = EXCLUDED.active, generation = EXCLUDED.generation, "
                "changed_at = EXCLUDED.changed_at, updated_at = now() "
                "WHERE r.generation = %s RETURNING r.generation",
                (*_row(new), expected.generation)).fetchone()
            if won is not None:
                return new
            # Lost: a new statement (a new snapshot) sees the winner's committed row.
            return self._read(conn, new.preferred, new.standby_preferred)

        return self._run("change the roles", body)

    def close(self) -> None:
        """Close the pool opened here (a pool passed in is left open). Safe twice."""
        self._conn.close()

    def _read(self, conn: psycopg.Connection[Any], primary: str, secondary: str) -> RoleState:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM {self._table} "
            "WHERE preferred = %s AND standby_preferred = %s", (primary, secondary)).fetchone()
        if row is None:
            return RoleState.initial(primary, secondary)
        active, generation, changed_at = row
        try:
            return RoleState(preferred=primary, standby_preferred=secondary, active=active,
                             generation=int(generation), changed_at=float(changed_at))
        except ConfigError as exc:
            raise ConfigError(f"the roles of {primary}/{secondary} in {self._table} at "
                              f"{self.where} are unusable ({exc}): delete the row to start "
                              "with the primary active") from None

    def _run(self, what: str, body: Callable[[psycopg.Connection[Any]], T]) -> T:
        return self._conn.open().run(f"roles store: {what}", body)


def _row(state: RoleState) -> tuple[str, str, str, int, float]:
    return (state.preferred, state.standby_preferred, state.active, state.generation,
            state.changed_at)
