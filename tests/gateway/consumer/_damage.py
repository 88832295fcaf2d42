"""Damage one page in the middle of a SQLite file, as a torn write or bad sector would."""

from __future__ import annotations

import hashlib
import random
import sqlite3
from pathlib import Path


def damage_table_root(path: Path, table: str) -> str:
    """Overwrite the root page of ``table`` (not page 1: the header stays valid) with
    random bytes; return the file's sha256 afterwards."""
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                               (table,)).fetchone()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert root > 1, "the table's root must not be the header page"
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    noise = random.Random(root).randbytes(page_size - 8)
    data[start + 8:start + page_size] = noise
    path.write_bytes(bytes(data))
    return sha256(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
