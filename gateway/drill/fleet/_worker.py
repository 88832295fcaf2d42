"""One receiver process of the fleet drill, as if on a machine of its own.

Run as ``python -m gateway.drill.fleet._worker --root DIR --worker NAME --store KIND``.
It runs an :class:`~gateway.aio.AsyncGeoReceiver` on the queue ``drill`` of the local
namespaces ``primary`` and ``secondary`` under ``DIR/namespaces`` (the namespaces are
the cloud, shared by every machine), with nothing else shared but the store:

* ``--store postgres``: the PostgreSQL de-duplication store whose DSN is in the
  environment variable ``GEOGATEWAY_DRILL_DSN`` (schema ``GEOGATEWAY_DRILL_SCHEMA``), and
  its inbox: each delivery is recorded by an inbox handler in ``SCHEMA.drill_effects``
  in the same transaction as the done mark;
* ``--store sqlite``: a SQLite dedup file of this machine's own,
  ``DIR/machines/NAME/dedup.db``, its inbox recording in that file's
  ``drill_effects`` (what a fleet gets without a shared store: each machine
  de-duplicates only against itself).

Either way an effect is ``INSERT ... ON CONFLICT (message_id) DO UPDATE SET count =
count + 1``, so a second delivery of an id is counted, not hidden. It prints ``ready``
once its signal handlers are installed; SIGTERM stops it gracefully and it writes its
counters to ``DIR/machines/NAME/stats.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from gateway._support.signals import stop_on_signals
from gateway.drill.fleet._shared import (
    CONCURRENCY,
    DSN_VARIABLE,
    ENTITY,
    LEASE,
    SCHEMA_VARIABLE,
    effects_sql,
)
from gateway.geo import AsyncGeoReceiver
from gateway.transports.base import ReceivedMessage
from replication import DedupStore

__all__ = ["main"]

logger = logging.getLogger("geogateway.drill")

def _store(root: Path, worker: str, kind: str) -> tuple[DedupStore, str]:
    """The dedup store and the effects upsert of this worker."""
    if kind == "postgres":
        from gateway.stores import PostgresDedupStore

        schema = os.environ[SCHEMA_VARIABLE]
        _, upsert = effects_sql(f"{schema}.drill_effects")
        store = PostgresDedupStore(os.environ[DSN_VARIABLE], schema=schema)
        return store, upsert.format(p="%s")
    from gateway.stores import SqliteDedupStore

    create, upsert = effects_sql("drill_effects")
    path = root / "machines" / worker / "dedup.db"
    sqlite_store = SqliteDedupStore(path)  # creates the file as a dedup store
    with contextlib.closing(sqlite3.connect(path, timeout=30.0)) as conn:
        conn.execute(create)
        conn.commit()
    return sqlite_store, upsert.format(p="?")


async def run_worker(root: Path, worker: str, kind: str) -> None:
    stop = stop_on_signals()
    print("ready", flush=True)  # the drill signals this process only from now on
    store, upsert = _store(root, worker, kind)

    def record(message: ReceivedMessage, conn: Any) -> None:
        conn.execute(upsert, (message.message_id, worker, time.time()))

    receiver = AsyncGeoReceiver(
        primary="local://primary", secondary="local://secondary", entity=ENTITY,
        dedup_store=store, data_dir=root / "namespaces", poll_wait=0.1, dedup_lease=LEASE,
    )
    async with receiver:
        await receiver.run(record, stop=stop, transactional=True, concurrency=CONCURRENCY)
        stats = receiver.stats
    out = root / "machines" / worker / "stats.json"
    out.write_text(json.dumps({"worker": worker, "delivered": stats.delivered,
                               "duplicates": stats.duplicates_suppressed}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.drill.fleet._worker")
    parser.add_argument("--root", type=Path, required=True, help="the drill's directory")
    parser.add_argument("--worker", required=True, help="this machine's name")
    parser.add_argument("--store", choices=("postgres", "sqlite"), required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    asyncio.run(run_worker(args.root, args.worker, args.store))


if __name__ == "__main__":
    main()
