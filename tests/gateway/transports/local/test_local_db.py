"""A local namespace file's transactions: a busy file is retried, other errors are not."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.transports.local._db import Database
from replication import NamespaceUnavailable


def _busy_then(rows: list[int], busy_times: int) -> Callable[[sqlite3.Connection], int]:
    """A transaction body that finds the file busy ``busy_times`` times, then writes."""
    calls = {"n": 0}

    def fn(conn: sqlite3.Connection) -> int:
        calls["n"] += 1
        if calls["n"] <= busy_times:
            raise sqlite3.OperationalError("database is locked")
        rows.append(calls["n"])
        return calls["n"]

    return fn


def test_a_write_that_finds_the_file_busy_is_retried_until_it_commits(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "ns.db"), namespace="primary", busy_deadline=10.0)
    rows: list[int] = []
    assert db.write(_busy_then(rows, busy_times=3)) == 4
    assert rows == [4]


def test_a_file_busy_past_the_deadline_is_an_outage_of_the_namespace(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "ns.db"), namespace="primary", busy_deadline=0.05)
    rows: list[int] = []
    with pytest.raises(NamespaceUnavailable, match="stayed locked by another process"):
        db.write(_busy_then(rows, busy_times=10**9))
    assert rows == []


def test_an_error_other_than_busy_is_not_retried(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "ns.db"), namespace="primary")
    calls: list[int] = []

    def fn(conn: sqlite3.Connection) -> None:
        calls.append(1)
        conn.execute("SELECT * FROM no_such_table")

    with pytest.raises(NamespaceUnavailable, match="no such table"):
        db.write(fn)
    assert calls == [1]
