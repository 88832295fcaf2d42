"""Connecting the PostgreSQL stores: pools, errors without secrets, versioned schemas.

Every PostgreSQL store (de-duplication and inbox, outbox, roles, the consumer's
checkpoints and ownership) takes either a DSN (``postgresql://user:pw@host/db``, or
``host=... dbname=...``; several hosts and ``target_session_attrs=read-write`` reach
whichever server of a geo-replicated pair is the primary) or a
``psycopg_pool.ConnectionPool`` the application already has. What is opened here is
closed by the store; a pool passed in is the application's.

Errors name the server (``host:port/database as user``), never the password:

- unreachable at start, a wrong password, a missing database, a schema newer than
  this code: :class:`~replication.ConfigError`, one line each, raised by the store's
  constructor;
- lost later (a restart, a failover of the server): :class:`~replication.StoreUnavailable`
  from the call that met it; the pool reconnects in the background, every 50-250 ms, and
  a call waiting for a connection is handed the first one made, so the store is used
  again within a fraction of a second of the server being back;
- not answering (a frozen server, a half-open connection, a lock held elsewhere): every
  call ends within its deadline (``call_timeout``, or its caller's sooner one) as
  :class:`~replication.StoreUnavailable` (see :mod:`gateway.stores._pg_conn`).

Schemas are versioned per component in ``<schema>.geogateway_schema``; each
component's migrations run once, in one transaction, under an advisory lock, so any
number of instances may start together.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gateway._support.secrets import redact
from gateway.stores._pg_conn import (
    QuietPoolWarnings,
    Reconnecting,
    Watchdog,
    caller_deadline,
    reconnecting_class,
    session_options,
)
from replication import ConfigError, GatewayError, StoreUnavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = [
    "PgTarget", "check_target", "describe_dsn", "is_dsn", "migrate", "open_pool", "pg_errors",
]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_DSN_PREFIXES = ("postgresql://", "postgres://")
_MIGRATION_TIMEOUT = 600.0  # seconds a start may wait for the schema's migrations


def is_dsn(value: object) -> bool:
    """Whether ``value`` is a PostgreSQL DSN (a URL, or ``key=value`` words with a
    ``host``/``dbname``) rather than a file path."""
    if not isinstance(value, str):
        return False
    if value.startswith(_DSN_PREFIXES):
        return True
    return bool(re.match(r"^\s*(host|hostaddr|dbname|service)\s*=", value))


def describe_dsn(dsn: str) -> str:
    """``host:port/database as user``: what errors and reports name, no password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:
        return "PostgreSQL (an unparsable DSN)"
    hosts = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = str(parts.get("port") or "5432")
    if "," in hosts:
        ports = port.split(",")
        where = ",".join(f"{h}:{ports[min(i, len(ports) - 1)]}"
                         for i, h in enumerate(hosts.split(",")))
    else:
        where = f"{hosts}:{port}"
    database = parts.get("dbname") or parts.get("user") or "postgres"
    user = parts.get("user")
    return f"{where}/{database}" + (f" as {user}" if user else "")


def _reason(exc: BaseException) -> str:
    """The server's or libpq's message, one line, secrets removed."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^connection failed: ", "", text)
    return redact(text)[:300]


def _config_error(exc: BaseException, where: str) -> ConfigError:
    text = str(exc)
    if "password authentication failed" in text or "no password supplied" in text:
        return ConfigError(f"PostgreSQL at {where} refused the credentials: check the DSN's "
                           "user and password")
    match = re.search(r'database "([^"]+)" does not exist', text)
    if match:
        return ConfigError(f"PostgreSQL at {where}: database {match.group(1)!r} does not "
                           f"exist: create it (CREATE DATABASE {match.group(1)}) or fix the DSN")
    if "permission denied" in text:
        return ConfigError(f"PostgreSQL at {where}: {_reason(exc)}: grant the rights listed "
                           "in the docs (The fleet on PostgreSQL) or use another user")
    return ConfigError(f"PostgreSQL at {where} is unreachable ({_reason(exc)}): start it, or "
                       "fix the DSN's host and port")


@contextmanager
def pg_errors(where: str, what: str) -> Iterator[None]:
    """Map psycopg's and the pool's errors raised inside onto the error tree."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise StoreUnavailable(f"{what}: PostgreSQL at {where} is unavailable "
                               f"({_reason(exc)})") from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(f"{what}: PostgreSQL at {where}: {_reason(exc)}") from exc
    except psycopg.Error as exc:
        raise GatewayError(f"{what}: PostgreSQL at {where} failed ({_reason(exc)})") from exc


class BrokenConnection(StoreUnavailable):
    """The connection broke: worth another try on another one."""


@dataclass
class PgTarget:
    """An open pool and what errors call it; ``owned`` when the store must close it.

    ``call_timeout``: the longest one store call takes (waiting for a connection, the
    server's answer, a lock), unless its caller's deadline (:func:`store_deadline`)
    is sooner; then it is :class:`~replication.StoreUnavailable`.
    """

    pool: ConnectionPool[Any]
    where: str
    schema: str
    owned: bool
    call_timeout: float = 5.0
    reconnecting: Reconnecting | None = None

    def deadline(self) -> float:
        """The monotonic time a call starting now must be over by."""
        return min(time.monotonic() + self.call_timeout, caller_deadline())

    @contextmanager
    def connection(self, what: str, deadline: float, *, watch: bool = True
                   ) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection until ``deadline``: waited for no longer than that, and
        broken (its socket shut) if the call is still running then (unless not
        ``watch``: the caller watches its own statements with :meth:`watched`).

        Raises:
            StoreUnavailable: no connection could be had in time (the reason of the
                last failed connection attempt, if any, is in the message).
        """
        from psycopg_pool import PoolTimeout

        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise PoolTimeout("the call's deadline has passed")
            conn = self.pool.getconn(timeout=left)
        except PoolTimeout as exc:
            last = self.reconnecting.last_error if self.reconnecting else ""
            raise StoreUnavailable(
                f"{what}: PostgreSQL at {self.where} is unavailable (no connection within "
                f"{max(left, 0):.3g} s{': ' + last if last else ''})") from exc
        watchdog = Watchdog.shared()
        token = watchdog.arm(conn, deadline) if watch else None
        try:
            with conn:  # commits, or rolls back on an error (a pooled one stays open)
                yield conn
        finally:
            if token is not None:
                watchdog.disarm(token)
            self.pool.putconn(conn)

    @contextmanager
    def watched(self, conn: psycopg.Connection[Any], deadline: float) -> Iterator[None]:
        """Break ``conn`` if what runs inside is still running at ``deadline``."""
        watchdog = Watchdog.shared()
        token = watchdog.arm(conn, deadline)
        try:
            yield
        finally:
            watchdog.disarm(token)

    @contextmanager
    def checked(self, what: str, deadline: float, *, watch: bool = True
                ) -> Iterator[psycopg.Connection[Any]]:
        """:meth:`connection` with its errors mapped: a broken connection is
        :class:`BrokenConnection` (worth another try on another one, see
        :meth:`retried`), none to be had in time or no answer in time (a statement or
        lock timeout, a frozen server) StoreUnavailable, another error on a sound
        connection (a deadlock) a GatewayError."""
        import psycopg

        conn: psycopg.Connection[Any] | None = None
        with pg_errors(self.where, what):
            try:
                with self.connection(what, deadline, watch=watch) as conn:
                    yield conn
            except psycopg.OperationalError as exc:
                late = f"{what}: PostgreSQL at {self.where} did not answer within " \
                       f"{self.call_timeout:.3g} s"
                if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
                    raise StoreUnavailable(f"{late} ({_reason(exc)})") from exc
                if conn is not None and not conn.broken and not conn.closed:
                    raise GatewayError(f"{what}: PostgreSQL at {self.where} failed "
                                       f"({_reason(exc)})") from exc
                if deadline <= time.monotonic():
                    raise StoreUnavailable(f"{late} (the connection was broken)") from exc
                self.drop_broken()  # the other broken connections too
                raise BrokenConnection(f"{what}: PostgreSQL at {self.where} is unavailable "
                                       f"({_reason(exc)})") from exc

    def _tries(self) -> int:
        # After a restart every connection opened before it is broken, and one in use
        # during the pool's check goes back to it unchecked: a call may meet each of
        # them before a new one, at most the pool's size of them.
        return self.pool.max_size + 1

    def retried(self, attempt: Callable[[float], T]) -> T:
        """``attempt(deadline)``, again while its connection is found broken (the
        server restarted since it was last used; at most once per pooled connection):
        nothing of a failed one committed. All within one deadline; a pool that had no
        connection to give in time, or a server that did not answer in time, is not
        tried again."""
        deadline = self.deadline()
        for _ in range(self._tries() - 1):
            try:
                return attempt(deadline)
            except BrokenConnection:
                continue
        return attempt(deadline)

    def drop_broken(self) -> None:
        """Test the pooled connections and replace the broken ones (quietly: the
        store reports the outage)."""
        with contextlib.suppress(Exception):
            self.pool.check()

    def run(self, what: str, body: Callable[[psycopg.Connection[Any]], T], *,
            timeout: float | None = None) -> T:
        """``body(conn)`` in one transaction on a pooled connection, errors mapped,
        within one deadline (``timeout`` seconds from now, by default the call's).

        A connection found broken (the server restarted since it was last used) is
        replaced and ``body`` tried again on another, within what is left of the
        deadline (at most once per pooled connection): nothing of a failed attempt was
        committed.
        """
        import psycopg

        deadline = self.deadline() if timeout is None else time.monotonic() + timeout
        tries = self._tries()
        with pg_errors(self.where, what):
            for attempt in range(1, tries + 1):
                conn: psycopg.Connection[Any] | None = None
                try:
                    with self.connection(what, deadline) as conn, conn.transaction():
                        return body(conn)
                except psycopg.OperationalError:
                    if attempt == tries or conn is None or not conn.broken:
                        raise
                    self.drop_broken()
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self.reconnecting is not None:
            self.reconnecting.closing.set()  # the attempts in progress end now
        if self.owned:
            self.pool.close()


def check_target(
    target: str | ConnectionPool[Any], *, what: str, schema: str = "geogateway",
    connect_timeout: float = 10.0, call_timeout: float = 5.0,
) -> str:
    """Check what :func:`open_pool` would open, without connecting; return where it is
    (``host:port/database as user``, never the password).

    Raises:
        ConfigError: as :func:`open_pool`, for everything but the server's answer.
    """
    try:
        import psycopg  # noqa: F401
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ConfigError(f"{what} on PostgreSQL needs the postgres extra: "
                          "pip install 'geogateway[postgres]'") from exc
    if not _SCHEMA_NAME.match(schema):
        raise ConfigError(f"schema must be a lower-case SQL name, not {schema!r}")
    if not call_timeout > 0 or not connect_timeout > 0:
        raise ConfigError("call_timeout and connect_timeout must be > 0 seconds")
    if isinstance(target, ConnectionPool):
        return describe_dsn(str(target.conninfo))
    if not isinstance(target, str) or not is_dsn(target):
        raise ConfigError(f"{what}: not a PostgreSQL DSN: give postgresql://user:password@"
                          "host:port/database")
    return describe_dsn(target)


def open_pool(
    target: str | ConnectionPool[Any], *, what: str, schema: str = "geogateway",
    max_size: int = 8, connect_timeout: float = 10.0, call_timeout: float = 5.0,
) -> PgTarget:
    """A pool on ``target`` (a DSN or a ``ConnectionPool``), checked by one connection.

    A pool opened here reconnects in the background as soon as the server is back,
    and its connections carry the statement and lock timeouts, keepalives and TCP
    timeout of ``call_timeout`` (see :mod:`gateway.stores._pg_conn`); an application's
    pool keeps its own settings (each call is still bounded by ``call_timeout``).

    Raises:
        ConfigError: the psycopg extra is missing; a bad schema name or timeout; the
            server is unreachable, refuses the credentials, or has no such database.
    """
    where = check_target(target, what=what, schema=schema,
                         connect_timeout=connect_timeout, call_timeout=call_timeout)
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool

    QuietPoolWarnings.install()
    if isinstance(target, ConnectionPool):
        try:
            with target.connection(timeout=connect_timeout) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:
            raise _config_error(exc, where) from None
        return PgTarget(target, where, schema, owned=False, call_timeout=call_timeout)
    assert isinstance(target, str)
    kwargs = {"connect_timeout": max(1, int(connect_timeout)),
              **session_options(call_timeout, str(conninfo_to_dict(target).get("options") or ""))}
    try:
        # One direct connection first, so a bad DSN fails here with its reason
        # instead of a pool timing out in the background.
        psycopg.connect(target, **kwargs).close()
    except psycopg.Error as exc:
        raise _config_error(exc, where) from None
    state = Reconnecting()
    pool: ConnectionPool[Any] = ConnectionPool(
        target, min_size=1, max_size=max_size, open=False, name=f"geogateway-{what}",
        kwargs=kwargs, timeout=call_timeout, connection_class=reconnecting_class(state),
    )
    pool.open(wait=True, timeout=connect_timeout)
    return PgTarget(pool, where, schema, owned=True, call_timeout=call_timeout,
                    reconnecting=state)


def migrate(target: PgTarget, component: str, steps: Sequence[str]) -> None:
    """Bring ``component``'s tables to ``len(steps)`` (each step one SQL script, run
    once, in order, in one transaction, under an advisory lock).

    ``{schema}`` in a step is the store's schema name.

    Raises:
        ConfigError: the database holds a newer version than this code knows (a newer
            geogateway migrated it: upgrade this one), or the user may not create the
            schema or tables (docs/guides/fleet.md lists the rights).
    """
    schema = target.schema

    def body(conn: psycopg.Connection[Any]) -> None:
        # Instances starting together wait here for the first one's migration: no
        # statement or lock timeout for this transaction.
        conn.execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"geogateway:{schema}",))
        # Created only when missing: CREATE ... IF NOT EXISTS checks the right to
        # create first, and a user with rights on the tables only (an administrator
        # migrated them) must be able to start.
        found = conn.execute("SELECT to_regnamespace(%s), to_regclass(%s)",
                             (schema, f"{schema}.geogateway_schema")).fetchone()
        if found is None or found[0] is None:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        if found is None or found[1] is None:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema}.geogateway_schema ("
                " component text PRIMARY KEY, version integer NOT NULL,"
                " migrated_at timestamptz NOT NULL DEFAULT now())"
            )
        row = conn.execute(
            f"SELECT version FROM {schema}.geogateway_schema WHERE component = %s",
            (component,),
        ).fetchone()
        version = 0 if row is None else int(row[0])
        if version > len(steps):
            raise ConfigError(
                f"the {component} tables in schema {schema!r} at {target.where} are at "
                f"version {version}, newer than this geogateway knows ({len(steps)}): "
                "upgrade geogateway")
        for step in steps[version:]:
            conn.execute(step.format(schema=schema))
        if version < len(steps):
            conn.execute(
                f"INSERT INTO {schema}.geogateway_schema (component, version) VALUES (%s, %s)"
                " ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version,"
                " migrated_at = now()", (component, len(steps)))

    try:
        # Not the calls' deadline: instances starting together wait for each other's
        # migrations, and one may build an index.
        target.run(f"the {component} schema", body, timeout=_MIGRATION_TIMEOUT)
    except StoreUnavailable as exc:
        raise ConfigError(str(exc)) from exc

