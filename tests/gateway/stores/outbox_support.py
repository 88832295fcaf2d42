"""The outbox tests' application: a database (a SQLite file or a PostgreSQL schema) with
an ``orders`` table, whose transactions write an order and add its outbox row.

``outbox_app`` (parametrized ``sqlite`` / ``postgres``) gives each test an
:class:`App`; ``app.new_outbox()`` opens another store on the same tables, as a second
dispatcher (another process or machine) would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.stores import PostgresOutbox, SqliteOutbox
from tests.postgres import Pg


class App:
    """The application: its connection, its transactions, its outbox."""

    def __init__(self, kind: str, *, path: Path | None = None, pg: Pg | None = None,
                 **options: Any) -> None:
        self.kind, self.path, self.pg, self.options = kind, path, pg, options
        self.opened: list[Any] = []
        self.outbox = self.new_outbox()
        self.conn = self.connect()
        with self.transaction() as conn:
            conn.execute(f"CREATE TABLE {self.table('orders')} (id TEXT PRIMARY KEY)")

    @property
    def target(self) -> str:
        """What a dispatcher's ``--outbox`` would be."""
        return str(self.path) if self.kind == "sqlite" else self.pg.dsn  # type: ignore[union-attr]

    def table(self, name: str) -> str:
        return name if self.kind == "sqlite" else f"{self.pg.schema}.{name}"  # type: ignore[union-attr]

    def new_outbox(self, **options: Any) -> Any:
        merged = {**self.options, **options}
        if self.kind == "sqlite":
            store: Any = SqliteOutbox(self.path, **merged)  # type: ignore[arg-type]
        else:
            assert self.pg is not None
            store = PostgresOutbox(self.pg.dsn, schema=self.pg.schema, **merged)
        self.opened.append(store)
        return store

    def connect(self) -> Any:
        if self.kind == "sqlite":
            # The default isolation: sqlite3 opens the transaction at the first write.
            conn: Any = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        else:
            assert self.pg is not None
            conn = psycopg.connect(self.pg.dsn)
        self.opened.append(conn)
        return conn

    @contextmanager
    def transaction(self, conn: Any = None) -> Iterator[Any]:
        """Commit on success, roll back when the block raises (the exception goes on)."""
        conn = conn or self.conn
        if self.kind == "sqlite":
            with conn:
                yield conn
        else:
            with conn.transaction():
                yield conn

    def order(self, order_id: str, message: Any, *, entity: str = "orders",
              conn: Any = None) -> str:
        """One committed order: its row and its outbox row in one transaction."""
        with self.transaction(conn) as c:
            c.execute(f"INSERT INTO {self.table('orders')} (id) VALUES ("
                      f"{'?' if self.kind == 'sqlite' else '%s'})", (order_id,))
            return str(self.outbox.add(c, message, entity=entity))

    def close(self) -> None:
        for thing in reversed(self.opened):
            thing.close()


@pytest.fixture(params=["sqlite", "postgres"])
def outbox_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    if request.param == "sqlite":
        app = App("sqlite", path=tmp_path / "app.db")
    else:
        app = App("postgres", pg=request.getfixturevalue("pg"))
    yield app
    app.close()
