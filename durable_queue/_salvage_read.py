"""Reading what can still be read from a damaged queue file, table by table.

A table is read in rowid order through SQLite's own b-tree: in chunks while that
works. Where a read fails, it goes on row by row to the last readable row, then
finds the next readable one: from the table's index when that can still be read
(it lists every row id, so each one is tried on its own and only the rows stored on
a damaged page are lost), else by probing the rowid space (a doubling step, then a
bisection), when the damage hides which ids it held. Each row is checked for the
types the queue wrote; a row that reads but does not make sense counts as lost.

Nothing here writes: the connection is SQLite's ``mode=ro``.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_queue._records import UnreadableRows

__all__ = ["TableRead", "damaged_pages", "read_table", "valid_properties"]

_CHUNK = 256
_MAX_ROWID = (1 << 63) - 1

Row = tuple[Any, ...]


@dataclass
class TableRead:
    """The rows of one table that could be read, in rowid order, and the gaps.

    ``lost`` counts the lost rows per destination when the index listed them all
    (``exact``); a gap found by probing the rowid space has no count.
    """

    rows: list[Row] = field(default_factory=list)
    unreadable: list[UnreadableRows] = field(default_factory=list)
    lost: Counter[str] = field(default_factory=Counter)
    exact: bool = True


def _fetch(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Row] | None:
    """The rows, or ``None`` when SQLite cannot read them (a damaged page)."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.DatabaseError:
        return None


def _known_ids(conn: sqlite3.Connection, table: str, index: str | None) -> dict[int, str] | None:
    """Every row id of ``table`` with its destination, from ``index`` alone (a covering
    read that touches no page of the table); ``None`` when it cannot be read."""
    if index is None:
        return None
    rows = _fetch(conn, f"SELECT id, destination FROM {table} INDEXED BY {index}", ())
    return None if rows is None else {int(i): str(d) for i, d in rows}


def read_table(
    conn: sqlite3.Connection,
    table: str,
    columns: str,
    *,
    valid: Callable[[Row], bool],
    index: str | None = None,
) -> TableRead:
    """Read every readable row of ``table`` (``columns`` start with its rowid).

    Args:
        valid: whether a row has the types the queue wrote.
        index: an index on ``(destination, id)`` that lists the table's rows.
    """
    key = columns.split(",", 1)[0].strip()
    # ``>= after + 1``, not ``> after``: SQLite seeks the bound first, and the page
    # holding ``after`` may be the damaged one the scan is stepping over.
    scan = f"SELECT {columns} FROM {table} WHERE {key} >= ? ORDER BY {key} LIMIT ?"
    one = f"SELECT {columns} FROM {table} WHERE {key} = ?"
    if _fetch(conn, f"SELECT 1 FROM sqlite_master WHERE name = '{table}'", ()) == []:
        return TableRead()  # a file from before this table existed
    known = _known_ids(conn, table, index)
    out = TableRead()
    lost: list[int] = []

    def keep(row: Row) -> None:
        if valid(row):
            out.rows.append(row)
        else:
            lost.append(int(row[0]))

    after = -_MAX_ROWID - 1
    while after < _MAX_ROWID:
        # In chunks; a failed chunk returns none of its rows: then row by row.
        chunk = _fetch(conn, scan, (after + 1, _CHUNK)) or _fetch(conn, scan, (after + 1, 1))
        if chunk:
            for row in chunk:
                keep(row)
            after = int(chunk[-1][0])
        elif chunk == []:
            break  # the end of the table
        elif known is not None:
            # The row after ``after`` cannot be read: try each id the index lists.
            after = _next_known(conn, one, after, known, keep, lost)
        else:
            after = _skip_unknown(conn, table, key, after, out)
    out.unreadable.extend(_ranges(table, lost, known))
    out.unreadable.sort(key=lambda u: u.first_id)
    if known is None:
        out.exact = not out.unreadable
    else:
        out.lost.update(known[i] for i in set(lost) if i in known)
        out.exact = all(i in known for i in lost)
    return out


def _next_known(
    conn: sqlite3.Connection, one: str, after: int, known: dict[int, str],
    keep: Callable[[Row], None], lost: list[int],
) -> int:
    """Read the ids the index lists after ``after`` one by one, until one reads; it is
    kept and the scan goes on after it. Returns that id (or the end)."""
    for row_id in sorted(i for i in known if i > after):
        found = _fetch(conn, one, (row_id,))
        if found:
            keep(found[0])
            return row_id
        lost.append(row_id)
    return _MAX_ROWID


def _skip_unknown(
    conn: sqlite3.Connection, table: str, key: str, after: int, out: TableRead
) -> int:
    """Find the first rowid past the damage by probing; record the gap. Returns the
    rowid to scan on from (exclusive)."""
    probe = f"SELECT {key} FROM {table} WHERE {key} >= ? ORDER BY {key} LIMIT 1"

    def readable(x: int) -> bool:
        return _fetch(conn, probe, (x,)) is not None

    bad, step = after + 1, 1
    good = None
    while good is None:
        x = min(after + 1 + step, _MAX_ROWID)
        if readable(x):
            good = x
        elif x >= _MAX_ROWID:
            out.unreadable.append(UnreadableRows(table=table, first_id=after + 1, last_id=None,
                                                 count=None))
            return _MAX_ROWID
        else:
            bad, step = x, step * 2
    while good - bad > 1:  # readable(bad) is False, readable(good) is True
        mid = (bad + good) // 2
        if readable(mid):
            good = mid
        else:
            bad = mid
    out.unreadable.append(UnreadableRows(table=table, first_id=after + 1, last_id=good - 1,
                                         count=None))
    return good - 1


def _ranges(table: str, lost: list[int], known: dict[int, str] | None) -> list[UnreadableRows]:
    """Lost row ids as ranges: ids with no readable row between them (by the index's
    list when there is one, else consecutive ids)."""
    gone = set(lost)
    groups: list[list[int]] = []
    if known is None:
        for row_id in sorted(gone):
            if groups and groups[-1][-1] == row_id - 1:
                groups[-1].append(row_id)
            else:
                groups.append([row_id])
    else:
        previous_lost = False
        for row_id in sorted(gone.union(known)):
            if row_id in gone:
                if not previous_lost:
                    groups.append([])
                groups[-1].append(row_id)
            previous_lost = row_id in gone
    return [
        UnreadableRows(
            table=table, first_id=g[0], last_id=g[-1], count=len(g),
            destinations=tuple(sorted({known[i] for i in g if i in known}))
            if known is not None else (),
        )
        for g in groups
    ]


def damaged_pages(conn: sqlite3.Connection) -> tuple[int, ...]:
    """The pages SQLite's ``dbstat`` finds damaged; ``()`` when it cannot tell (a build
    without ``dbstat``, or damage it does not see)."""
    rows = _fetch(
        conn,
        "SELECT DISTINCT pageno FROM dbstat WHERE pagetype NOT IN "
        "('leaf', 'internal', 'overflow') ORDER BY pageno",
        (),
    )
    return tuple(int(r[0]) for r in rows or ())


def valid_properties(text: object) -> bool:
    """Whether ``text`` is what the queue stores for properties (``None`` or a JSON object)."""
    if text is None:
        return True
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
