"""What is kept between runs and shared between processes and machines: the
de-duplication store (with its transactional inbox), the outbox, the roles store and
the sessions' positions, on SQLite files (one machine) and on PostgreSQL (a fleet),
and the embedded PostgreSQL server that tests, drills and ``geogateway postgres start``
run.

Imported on first use (PEP 562): the stores bring in SQLite helpers that a sender
without de-duplication never needs.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.stores._dedup import SqliteDedupStore
    from gateway.stores._dedup_fallback import FallbackDedupStore
    from gateway.stores._dedup_open import DedupTarget, open_dedup_store
    from gateway.stores._outages import StoreOutages
    from gateway.stores._outbox_core import (
        DeadRow,
        DestinationStats,
        Outbox,
        OutboxClaim,
        OutboxRow,
        OutboxStats,
    )
    from gateway.stores._outbox_pg import PostgresOutbox
    from gateway.stores._outbox_sqlite import SqliteOutbox
    from gateway.stores._pg import PgTarget, describe_dsn, is_dsn, migrate, open_pool, pg_errors
    from gateway.stores._pg_conn import QuietPoolWarnings, store_deadline
    from gateway.stores._pg_dedup import PostgresDedupStore
    from gateway.stores._pg_roles import PostgresRoleStore
    from gateway.stores._pg_server import EmbeddedPostgres
    from gateway.stores._roles import RoleStore, RoleStoreLike
    from gateway.stores._sessions import SqliteSessionStore

_LAZY = {
    "DedupTarget": "gateway.stores._dedup_open",
    "FallbackDedupStore": "gateway.stores._dedup_fallback",
    "open_dedup_store": "gateway.stores._dedup_open",
    "DeadRow": "gateway.stores._outbox_core",
    "DestinationStats": "gateway.stores._outbox_core",
    "Outbox": "gateway.stores._outbox_core",
    "OutboxClaim": "gateway.stores._outbox_core",
    "OutboxRow": "gateway.stores._outbox_core",
    "OutboxStats": "gateway.stores._outbox_core",
    "PostgresOutbox": "gateway.stores._outbox_pg",
    "SqliteOutbox": "gateway.stores._outbox_sqlite",
    "EmbeddedPostgres": "gateway.stores._pg_server",
    "PgTarget": "gateway.stores._pg",
    "describe_dsn": "gateway.stores._pg",
    "is_dsn": "gateway.stores._pg",
    "migrate": "gateway.stores._pg",
    "open_pool": "gateway.stores._pg",
    "pg_errors": "gateway.stores._pg",
    "QuietPoolWarnings": "gateway.stores._pg_conn",
    "StoreOutages": "gateway.stores._outages",
    "store_deadline": "gateway.stores._pg_conn",
    "PostgresDedupStore": "gateway.stores._pg_dedup",
    "PostgresRoleStore": "gateway.stores._pg_roles",
    "RoleStore": "gateway.stores._roles",
    "RoleStoreLike": "gateway.stores._roles",
    "SqliteDedupStore": "gateway.stores._dedup",
    "SqliteSessionStore": "gateway.stores._sessions",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "DeadRow",
    "DedupTarget",
    "DestinationStats",
    "EmbeddedPostgres",
    "FallbackDedupStore",
    "Outbox",
    "OutboxClaim",
    "OutboxRow",
    "OutboxStats",
    "PgTarget",
    "PostgresDedupStore",
    "PostgresOutbox",
    "PostgresRoleStore",
    "QuietPoolWarnings",
    "RoleStore",
    "RoleStoreLike",
    "SqliteDedupStore",
    "SqliteOutbox",
    "SqliteSessionStore",
    "StoreOutages",
    "describe_dsn",
    "is_dsn",
    "migrate",
    "open_dedup_store",
    "open_pool",
    "pg_errors",
    "store_deadline",
]
