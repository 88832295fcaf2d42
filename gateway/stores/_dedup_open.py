"""Opening the de-duplication store a receiver was given: a path, a DSN, a pool or a store."""

from __future__ import annotations

import os
from typing import Any, cast

from gateway.stores._dedup import SqliteDedupStore
from gateway.stores._dedup_fallback import FallbackDedupStore
from gateway.stores._pg import is_dsn
from replication import ConfigError, DedupStore, DedupWindow

__all__ = ["DedupTarget", "open_dedup_store"]

DedupTarget = str | os.PathLike[str] | DedupStore | Any
"""What a receiver's ``dedup_store`` takes: a SQLite file path, a PostgreSQL DSN
(``postgresql://...`` or ``host=... dbname=...``), a ``psycopg_pool.ConnectionPool`` or a
:class:`replication.DedupStore`."""


def _pool_kind(target: object) -> str | None:
    """"sync" or "async" for a psycopg_pool pool, else None (psycopg_pool imported only
    when ``target`` could be one)."""
    if isinstance(target, (str, os.PathLike, DedupStore)):
        return None
    try:
        from psycopg_pool import AsyncConnectionPool, ConnectionPool
    except ImportError:
        return None
    if isinstance(target, ConnectionPool):
        return "sync"
    return "async" if isinstance(target, AsyncConnectionPool) else None


def open_dedup_store(
    target: DedupTarget,
    *,
    window: DedupWindow | None = None,
    fallback: str | os.PathLike[str] | None = None,
) -> DedupStore:
    """The store for ``target``: a path opens a :class:`SqliteDedupStore`, a DSN or a
    pool a :class:`PostgresDedupStore` (schema ``geogateway``; pass a store of your own
    for another; it connects on :meth:`~PostgresDedupStore.open` or its first call), a
    store is used as it is. A DSN is never taken for a file name.

    Args:
        target: see :data:`DedupTarget`.
        window: the window of a store opened here (default 10 min, 1M ids).
        fallback: a SQLite file to fall back on while a shared store is unreachable
            (:class:`FallbackDedupStore`); None: wait for it.

    Raises:
        ConfigError: a target of another type, an async pool, a fallback for a store
            that is local already, or a bad option (the server's errors come when the
            store is opened).
    """
    window = window or DedupWindow()
    kind = _pool_kind(target)
    store: DedupStore
    if isinstance(target, DedupStore):
        store = target
    elif kind == "async":
        raise ConfigError("dedup_store takes a psycopg_pool.ConnectionPool (the store's "
                          "calls run in worker threads), not an AsyncConnectionPool")
    elif kind == "sync" or is_dsn(target):
        from gateway.stores._pg_dedup import PostgresDedupStore

        # Connected on first use or open(): a receiver's constructor does no network I/O.
        store = PostgresDedupStore(cast(Any, target), window=window, lazy=True)
    elif isinstance(target, (str, os.PathLike)):
        store = SqliteDedupStore(target, window=window)
    else:
        raise ConfigError("dedup_store must be a file path, a PostgreSQL DSN, a "
                          f"psycopg_pool.ConnectionPool or a DedupStore, not "
                          f"{type(target).__name__}")
    if fallback is None:
        return store
    if isinstance(store, SqliteDedupStore) or is_dsn(fallback):
        store.close()
        raise ConfigError("dedup_fallback is a local SQLite file to use while a shared "
                          "(PostgreSQL) dedup store is unreachable")
    return FallbackDedupStore(store, fallback)
