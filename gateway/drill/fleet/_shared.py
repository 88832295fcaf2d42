"""What the fleet drill and its machine processes agree on: entity, environment, effects.

A module of its own so that the drill (:mod:`gateway.drill.fleet._scenario`) need not import the
worker: ``python -m gateway.drill.fleet._worker`` loads the package ``gateway.drill``
first, which must not have loaded the worker's module already.
"""

from __future__ import annotations

__all__ = ["CONCURRENCY", "DSN_VARIABLE", "ENTITY", "LEASE", "SCHEMA_VARIABLE", "effects_sql"]

ENTITY = "drill"
DSN_VARIABLE = "GEOGATEWAY_DRILL_DSN"
SCHEMA_VARIABLE = "GEOGATEWAY_DRILL_SCHEMA"
#: A killed worker's in-flight ids are claimable again after 3 s (default 60 s).
LEASE = 3.0
#: Inbox handlers running at once in each worker.
CONCURRENCY = 4


def effects_sql(table: str) -> tuple[str, str]:
    """(CREATE TABLE, the effect's upsert) for ``table``; ``%s`` or ``?`` placeholders
    are filled in for the caller's driver with ``.format(p=...)``."""
    create = (f"CREATE TABLE IF NOT EXISTS {table} (message_id TEXT PRIMARY KEY,"
              " worker TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,"
              " count INTEGER NOT NULL DEFAULT 1)")
    upsert = (f"INSERT INTO {table} (message_id, worker, at, count) VALUES ({{p}}, {{p}}, {{p}}, 1)"
              f" ON CONFLICT (message_id) DO UPDATE SET count = {table}.count + 1")
    return create, upsert


