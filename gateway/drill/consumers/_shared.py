"""What the consumer drill and its worker processes agree on: entity, balancing, records.

A module of its own so that the drill (:mod:`gateway.drill.consumers._scenario`) need not
import the worker: ``python -m gateway.drill.consumers._worker`` loads the package
``gateway.drill`` first, which must not have loaded the worker's module already.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gateway.consumer import BalanceSettings

__all__ = ["DRILL_BALANCE", "ENTITY", "PARTITIONS", "ReadSpan", "connection_string_variable",
           "create_delivered_table"]

ENTITY = "drill-events"
PARTITIONS = 4

#: Fast balancing for a drill: a cycle every 0.2 s while anything moves, a heartbeat
#: every 0.5 s, and a worker whose heartbeat is 2 s old is dead (its partitions are
#: claimed at the next poll). A graceful stop waits at most 5 s for takers, then
#: releases what is left, so it ends well within the drill's stop timeout (4 times
#: that). Production keeps the defaults (12 s expiry, 30 s hand-over timeout).
DRILL_BALANCE = BalanceSettings(interval=0.2, idle_interval=0.5, heartbeat_interval=0.5,
                                heartbeat_expiry=2.0, fence_margin=0.3, settle_cycles=2,
                                handover_timeout=5.0)

_DELIVERED_TABLE = """
CREATE TABLE IF NOT EXISTS drill_delivered (
    message_id TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    at REAL NOT NULL,
    count INTEGER NOT NULL DEFAULT 1
)"""


def create_delivered_table(conn: sqlite3.Connection) -> None:
    """Create ``drill_delivered`` in the dedup file (after the store created it)."""
    conn.execute(_DELIVERED_TABLE)


def connection_string_variable(namespace: str) -> str:
    """The environment variable that gives a worker an emulated namespace (Event Hubs)."""
    return f"GEOGATEWAY_DRILL_{namespace.upper()}"


@dataclass
class ReadSpan:
    """One stretch during which a worker owned a partition, as the worker saw it
    (wall-clock times, ``time.time()``): when it claimed the partition, first and last
    read events from it, and let it go (None: not yet, or never, as when killed).
    Workers write theirs to their progress files (as JSON objects of these fields)."""

    partition: str  # NAMESPACE/ID
    worker: str
    claimed: float
    first_read: float | None = None
    last_read: float | None = None
    released: float | None = None
