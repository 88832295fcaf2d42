"""Benchmark of the durable queue's write-ahead log sizing: disk use and throughput
against the same queue with SQLite's fixed WAL settings (checkpoint at 1000 pages,
-wal truncated to 4 MiB), in the same run.

Run: ``.venv/bin/python benchmarks/bench_queue_disk.py [--quick]``

Every message is 1 KiB of random bytes. Throughput rows interleave the two
contenders in small chunks on files in one temp dir (a disk with room), alternating
which goes first, and report medians (ratios are medians of per-chunk ratios). The
tmpfs rows fill a 2 MiB tmpfs (``mount``, root only; else they say so) one put per
commit until the queue is full, and report the payload stored and the most the files
(queue, -wal, -shm) held beyond twice the payload.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from durable_queue import DurableQueue
from replication import Message, QueueFull

BODY_SIZE = 1000
TIMED = 150  # puts timed on the tmpfs: fewer than fit with the fixed WAL


@dataclass(frozen=True, kw_only=True)
class Row:
    name: str
    ours: str
    other: str
    ratio: str
    target: str
    verdict: str


def fixed_wal(q: DurableQueue) -> DurableQueue:
    """``q`` with the WAL settings geogateway had before: SQLite's default checkpoint
    (1000 pages) and a 4 MiB -wal limit, never changed afterwards."""
    store = q._store
    conn = store.live()
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    conn.execute(f"PRAGMA journal_size_limit = {4 << 20}")
    store._wal_pages = 1000
    store._retune = lambda conn, free: None  # type: ignore[method-assign]
    return q


def message() -> Message:
    return Message(os.urandom(BODY_SIZE))


def paired(chunks: int, ours: Callable[[], float], other: Callable[[], float]
           ) -> tuple[float, float, float]:
    mine, theirs, ratios = [], [], []
    for i in range(chunks):
        if i % 2:
            b, a = other(), ours()
        else:
            a, b = ours(), other()
        mine.append(a)
        theirs.append(b)
        ratios.append(b / a)
    return statistics.median(mine), statistics.median(theirs), statistics.median(ratios)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def throughput(tmp: Path, chunks: int) -> list[Row]:
    rows = []
    new = DurableQueue(tmp / "new.db")
    old = fixed_wal(DurableQueue(tmp / "old.db"))
    # 1. put, one per commit (a sender buffering during an outage)
    per = 10
    a, b, r = paired(chunks, lambda: timed(lambda: [new.put("d", message()) for _ in range(per)]),
                     lambda: timed(lambda: [old.put("d", message()) for _ in range(per)]))
    rows.append(_rate("put, one per commit", per / a, per / b, r, 0.9))
    # 2. put_many(100)
    a, b, r = paired(chunks, lambda: timed(lambda: new.put_many("d", [message()] * 100)),
                     lambda: timed(lambda: old.put_many("d", [message()] * 100)))
    rows.append(_rate("put_many(100)", 100 / a, 100 / b, r, 0.9))
    # 3. get_batch(100) + ack at the backlog built above, refilled as it goes

    def drain(q: DurableQueue) -> float:
        q.put_many("d", [message()] * 100)
        return timed(lambda: q.ack(q.get_batch("d", 100)))

    a, b, r = paired(chunks, lambda: drain(new), lambda: drain(old))
    rows.append(_rate(f"get_batch(100)+ack at {len(new):,} waiting", 100 / a, 100 / b, r, 0.9))
    new.close()
    old.close()
    return rows


def small_backlog(tmp: Path, chunks: int) -> Row:
    """get_batch(100)+ack on a 1,000-message queue: a small file, where the threshold
    is lowest (a quarter of the file)."""
    queues = []
    for name, fix in (("new", False), ("old", True)):
        q = DurableQueue(tmp / f"small-{name}.db", shrink=False)
        q.put_many("d", [message()] * 1000)
        queues.append(fixed_wal(q) if fix else q)
    new, old = queues

    def cycle(q: DurableQueue) -> float:
        taken = timed(lambda: q.ack(q.get_batch("d", 100)))
        q.put_many("d", [message()] * 100)
        return taken

    a, b, r = paired(chunks, lambda: cycle(new), lambda: cycle(old))
    new.close()
    old.close()
    return _rate("get_batch(100)+ack at 1,000 waiting", 100 / a, 100 / b, r, 0.9)


def _rate(name: str, ours: float, other: float, ratio: float, target: float) -> Row:
    return Row(name=name, ours=f"{ours:,.0f} msg/s", other=f"{other:,.0f} msg/s",
               ratio=f"{ratio:.2f}x", target=f">= {target:g}x",
               verdict="PASS" if ratio >= target else "FAIL")


def on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
               if p.exists())


@dataclass
class Filled:
    """One queue filled on a 2 MiB tmpfs until it was full."""

    payload: int = 0
    excess: int = 0  # the most the files held beyond twice the payload
    seconds: float = 0.0  # for the first TIMED puts


def fill_tmpfs(where: Path, *, fixed: bool) -> Filled:
    q = DurableQueue(where / "q.db")
    if fixed:
        fixed_wal(q)
        q._store.room.reserve = 0  # no reserve before either
    out = Filled()
    started = time.perf_counter()
    try:
        while True:
            q.put("d", message())
            out.payload += BODY_SIZE
            out.excess = max(out.excess, on_disk(q.path) - 2 * out.payload)
            if out.payload == TIMED * BODY_SIZE:
                out.seconds = time.perf_counter() - started
    except QueueFull:
        pass
    q.close()
    return out


def small_disk(tmp: Path) -> list[Row]:
    """A 2 MiB tmpfs filled with 1 KiB messages, one per commit, until the queue is full."""
    filled = {}
    for name in ("new", "old"):
        where = tmp / f"tmpfs-{name}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode:
            why = f"n/a: cannot mount a tmpfs ({proc.stderr.strip()})"
            return [Row(name="2 MiB tmpfs", ours="-", other="-", ratio="-", target="-",
                        verdict=why)]
        try:
            filled[name] = fill_tmpfs(where, fixed=name == "old")
        finally:
            subprocess.run(["umount", "-l", str(where)], check=True)
    new, old = filled["new"], filled["old"]
    return [
        Row(name="2 MiB tmpfs: payload stored until QueueFull", ours=f"{new.payload >> 10} KiB",
            other=f"{old.payload >> 10} KiB", ratio=f"{new.payload / old.payload:.2f}x",
            target="ours >= 768 KiB",
            verdict="PASS" if new.payload >= 768 << 10 else "FAIL"),
        Row(name="2 MiB tmpfs: most the files held beyond 2x the payload",
            ours=f"{new.excess >> 10} KiB", other=f"{old.excess >> 10} KiB", ratio="-",
            target="ours <= 256 KiB", verdict="PASS" if new.excess <= 256 << 10 else "FAIL"),
        Row(name=f"2 MiB tmpfs: put, one per commit (first {TIMED})",
            ours=f"{TIMED / new.seconds:,.0f} msg/s", other=f"{TIMED / old.seconds:,.0f} msg/s",
            ratio=f"{old.seconds / new.seconds:.2f}x", target="(for comparison)",
            verdict="info"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer chunks")
    args = parser.parse_args()
    chunks = 40 if args.quick else 150
    console = Console(width=150)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-qd-") as tmpdir:
        tmp = Path(tmpdir)
        rows = [*throughput(tmp, chunks), small_backlog(tmp, chunks), *small_disk(tmp)]
    table = Table(title="durable queue: WAL sized to the free disk space, vs SQLite's fixed "
                        f"default ({'quick' if args.quick else 'full'})")
    for column in ("benchmark", "ours", "fixed WAL (before)", "ratio", "target", ""):
        table.add_column(column)
    for r in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(r.verdict, "dim")
        table.add_row(r.name, r.ours, r.other, r.ratio, r.target, f"[{style}]{r.verdict}[/]")
    console.print(table)
    console.print(f"{chunks} interleaved pairs per throughput row (put: 10 puts each); "
                  f"total {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
