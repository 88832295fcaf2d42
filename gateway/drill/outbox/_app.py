"""The application process of the outbox drill: orders committed with their outbox rows.

Run as ``python -m gateway.drill.outbox._app --root DIR --store sqlite|postgres
--orders N`` with the outbox in ``$GEOGATEWAY_OUTBOX`` (the DSN, whose password stays
off the command line, or the SQLite file). Each order is one transaction of the
application's own::

    INSERT INTO drill_orders (message_id, entity, seq, at) VALUES (...)
    outbox.add(conn, Message(..., message_id=..., properties={"seq": seq}), entity=...)
    COMMIT                      -- or, for about one order in ``--rollback-every``,
    ROLLBACK                    -- on purpose, after the outbox row was added

The orders go to :data:`DESTINATIONS` in turn; ``seq`` counts each destination's
*committed* orders from 1, so the receiver can tell the order they arrive in. The ids
rolled back are appended to ``DIR/rolled-back.txt`` once rolled back; the committed
ones are the rows of ``drill_orders``. A line ``committed N`` goes to stdout every
few orders, and ``done N`` at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from gateway.drill.outbox._shared import DESTINATIONS, ORDERS_TABLE
from gateway.stores import PostgresOutbox, SqliteOutbox
from replication import Message

__all__ = ["main", "run_app"]
_REPORT_EVERY = 5


class _Rollback(Exception):
    """Raised inside an order's transaction to roll it back on purpose."""


def _orders_sql(placeholder: str) -> tuple[str, str]:
    create = (f"CREATE TABLE IF NOT EXISTS {ORDERS_TABLE} (message_id TEXT PRIMARY KEY, "
              "entity TEXT NOT NULL, seq INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL)")
    insert = (f"INSERT INTO {ORDERS_TABLE} (message_id, entity, seq, at) VALUES "
              f"({', '.join([placeholder] * 4)})")
    return create, insert


def _message(i: int, entity: str, seq: int) -> Message:
    return Message(f"order {i} for {entity}".encode(), message_id=f"order-{i:07d}",
                   properties={"seq": seq, "entity": entity})


def run_app(root: Path, store: str, orders: int, rollback_every: int, pace: float,
            seed: int) -> int:
    """Commit ``orders`` orders (rolling back about one in ``rollback_every``); return
    how many were committed."""
    target = os.environ["GEOGATEWAY_OUTBOX"]
    rng = random.Random(seed)
    seqs = dict.fromkeys(DESTINATIONS, 0)
    committed = 0
    with (root / "rolled-back.txt").open("a", encoding="utf-8") as rolled, \
            closing(_Orders.open(store, target)) as app:
        for i in range(orders):
            entity = DESTINATIONS[i % len(DESTINATIONS)]
            message = _message(i, entity, seqs[entity] + 1)
            if rng.randrange(rollback_every) == 0:
                app.order(message, entity, rollback=True)
                rolled.write(message.message_id + "\n")
                rolled.flush()
            else:
                app.order(message, entity, rollback=False)
                seqs[entity] += 1
                committed += 1
            if committed % _REPORT_EVERY == 0:
                print(f"committed {committed}", flush=True)
            if pace:
                time.sleep(rng.uniform(0, 2 * pace))
    return committed


class _Orders:
    """The application's database: its table and the outbox, on one connection."""

    def __init__(self, conn: Any, outbox: Any, insert: str) -> None:
        self.conn, self.outbox, self.insert = conn, outbox, insert

    @classmethod
    def open(cls, store: str, target: str) -> _Orders:
        if store == "sqlite":
            outbox: Any = SqliteOutbox(target)
            conn: Any = sqlite3.connect(target, timeout=30.0, isolation_level=None)
            create, insert = _orders_sql("?")
            conn.execute(create)
            return cls(conn, outbox, insert)
        import psycopg

        schema = os.environ["GEOGATEWAY_DRILL_SCHEMA"]
        outbox = PostgresOutbox(target, schema=schema)
        conn = psycopg.connect(target, autocommit=True)
        create, insert = _orders_sql("%s")
        conn.execute(create.replace(ORDERS_TABLE, f"{schema}.{ORDERS_TABLE}"))
        return cls(conn, outbox, insert.replace(ORDERS_TABLE, f"{schema}.{ORDERS_TABLE}"))

    def order(self, message: Message, entity: str, *, rollback: bool) -> None:
        """The order row and its outbox row in one transaction, committed or not."""
        seq = message.properties["seq"]
        if isinstance(self.conn, sqlite3.Connection):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute(self.insert, (message.message_id, entity, seq, time.time()))
                self.outbox.add(self.conn, message, entity=entity)
                if rollback:
                    raise _Rollback
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                if not rollback:
                    raise
            return
        try:
            with self.conn.transaction():
                self.conn.execute(self.insert, (message.message_id, entity, seq, time.time()))
                self.outbox.add(self.conn, message, entity=entity)
                if rollback:
                    raise _Rollback
        except _Rollback:
            pass

    def close(self) -> None:
        self.conn.close()
        self.outbox.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.drill.outbox._app")
    parser.add_argument("--root", type=Path, required=True, help="the drill's directory")
    parser.add_argument("--store", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--orders", type=int, required=True)
    parser.add_argument("--rollback-every", type=int, default=7)
    parser.add_argument("--pace", type=float, default=0.005,
                        help="mean seconds between orders")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    committed = run_app(args.root, args.store, args.orders, args.rollback_every, args.pace,
                        args.seed)
    print(f"done {committed}", flush=True)


if __name__ == "__main__":
    main()
