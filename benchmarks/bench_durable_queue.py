"""Benchmark of the durable queue against raw sqlite3, persist-queue and litequeue.

Run: ``.venv/bin/python benchmarks/bench_durable_queue.py [--quick]``

Every message is 1 KiB of random bytes. Each comparison runs the contenders side
by side on files in one temp dir, alternating which goes first, for several
rounds, and reports medians (ratios are medians of per-round ratios, so a noisy
moment on this shared machine hits both sides of a pair). All files use WAL and
``synchronous=FULL`` unless a library sets its own (litequeue: NORMAL).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from durable_queue import DurableQueue, Replayer
from replication import Message

BODY = os.urandom(1024)
HERE = Path(__file__).resolve()

_RAW_SCHEMA = (
    "CREATE TABLE m (id INTEGER PRIMARY KEY, destination TEXT NOT NULL, "
    "message_id TEXT NOT NULL, partition_key TEXT, properties TEXT, body BLOB NOT NULL, "
    "enqueued_at REAL NOT NULL, size INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX m_by_destination ON m (destination, id)",
)
_RAW_INSERT = (
    "INSERT INTO m (destination, message_id, partition_key, properties, body, enqueued_at, "
    "size) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_RAW_SELECT = (
    "SELECT id, destination, message_id, partition_key, properties, body, enqueued_at, "
    "attempts, size FROM m WHERE destination = ? ORDER BY id LIMIT ?"
)


@dataclass(frozen=True, kw_only=True)
class Result:
    """One row of the table."""

    name: str
    ours: str
    other: str
    ratio: str
    target: str
    verdict: str


@dataclass(frozen=True, kw_only=True)
class Scale:
    """How much work each section does."""

    chunks: int
    put_chunk: int
    foreign: int
    foreign_seconds: float
    levels: tuple[int, ...]
    cycle: int
    producers: int
    foreign_producers: int
    outage: int


FULL = Scale(
    chunks=150,
    put_chunk=10,
    foreign=300,
    foreign_seconds=3.0,
    levels=(1_000, 10_000, 50_000),
    cycle=5000,
    producers=2000,
    foreign_producers=300,
    outage=200_000,
)
QUICK = Scale(
    chunks=40,
    put_chunk=10,
    foreign=100,
    foreign_seconds=1.0,
    levels=(1_000, 10_000, 50_000),
    cycle=2000,
    producers=500,
    foreign_producers=100,
    outage=20_000,
)


def messages(n: int) -> list[Message]:
    return [Message(body=BODY) for _ in range(n)]


def raw_db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    for statement in _RAW_SCHEMA:
        conn.execute(statement)
    return conn


def raw_rows(batch: list[Message]) -> list[tuple[object, ...]]:
    now = time.time()
    return [("d", m.message_id, m.partition_key, None, m.body, now, m.size) for m in batch]


def stopwatch(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(
    chunks: int, per_chunk: int, ours: Callable[[], float], other: Callable[[], float]
) -> tuple[float, float, float]:
    """Interleave small chunks of both contenders; each call returns its timed seconds.

    The order alternates every pair, and the ratio is the median of per-pair
    ratios, so a noisy moment on the shared machine hits both sides of a pair.

    Returns:
        Our rate, their rate (messages/s from the median chunk) and the ratio.
    """
    mine, theirs, ratios = [], [], []
    for i in range(chunks):
        if i % 2:
            b = other()
            a = ours()
        else:
            a = ours()
            b = other()
        mine.append(a)
        theirs.append(b)
        ratios.append(b / a)
    return (
        per_chunk / statistics.median(mine),
        per_chunk / statistics.median(theirs),
        statistics.median(ratios),
    )


def row(name: str, ours: float, other: float, ratio: float, target: float, what: str) -> Result:
    return Result(
        name=name,
        ours=f"{ours:,.0f}",
        other=f"{other:,.0f} ({what})",
        ratio=f"{ratio:.2f}x",
        target=f">= {target:g}x",
        verdict="PASS" if ratio >= target else "FAIL",
    )


# -- 1. put one at a time -----------------------------------------------------


def bench_put(tmp: Path, s: Scale) -> Result:
    q = DurableQueue(tmp / "put.db")
    conn = raw_db(tmp / "put-raw.db")

    def ours() -> float:
        batch = messages(s.put_chunk)
        return stopwatch(lambda: [q.put("d", m) for m in batch])

    def raw() -> float:
        # What a hand-written put does: turn the message into a row, then one
        # BEGIN IMMEDIATE / INSERT / COMMIT per message.
        batch = messages(s.put_chunk)

        def run() -> None:
            for m in batch:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    _RAW_INSERT,
                    ("d", m.message_id, m.partition_key, None, m.body, time.time(), m.size),
                )
                conn.execute("COMMIT")

        return stopwatch(run)

    a, b, ratio = paired(s.chunks, s.put_chunk, ours, raw)
    q.close()
    conn.close()
    return row("1. put, one per commit", a, b, ratio, 0.9, "raw sqlite3")


# -- 2. put_many of 100 ---------------------------------------------------------


def bench_put_many(tmp: Path, s: Scale) -> Result:
    q = DurableQueue(tmp / "many.db", max_messages=None, max_bytes=None)
    conn = raw_db(tmp / "many-raw.db")

    def ours() -> float:
        batch = messages(100)
        return stopwatch(lambda: q.put_many("d", batch))

    def raw() -> float:
        batch = messages(100)

        def run() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_RAW_INSERT, raw_rows(batch))
            conn.execute("COMMIT")

        return stopwatch(run)

    a, b, ratio = paired(s.chunks, 100, ours, raw)
    q.close()
    conn.close()
    return row("2. put_many(100)", a, b, ratio, 0.8, "raw executemany")


# -- 3. get_batch + ack -----------------------------------------------------------


def drain_ours(q: DurableQueue) -> int:
    n = 0
    while batch := q.get_batch("d", 100):
        q.ack(batch)
        n += len(batch)
    return n


def ours_batch(q: DurableQueue) -> float:
    def run() -> None:
        q.ack(q.get_batch("d", 100))

    return stopwatch(run)


def rate_for(op: Callable[[], None], *, seconds: float, limit: int) -> float:
    """Operations per second of ``op`` run back to back for ``seconds`` (or ``limit`` times)."""
    done, started = 0, time.perf_counter()
    while done < limit and time.perf_counter() - started < seconds:
        op()
        done += 1
    return done / (time.perf_counter() - started)


def bench_drain(tmp: Path, s: Scale) -> list[Result]:
    import litequeue
    import persistqueue

    q = DurableQueue(tmp / "drain.db", max_messages=None, max_bytes=None)
    conn = raw_db(tmp / "drain-raw.db")
    for _ in range(s.chunks):
        q.put_many("d", messages(100))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_RAW_INSERT, raw_rows(messages(100)))
        conn.execute("COMMIT")

    def raw() -> float:
        def run() -> None:
            rows = conn.execute(_RAW_SELECT, ("d", 100)).fetchall()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM m WHERE id = ?", [(r[0],) for r in rows])
            conn.execute("COMMIT")

        return stopwatch(run)

    a, b, ratio = paired(s.chunks, 100, lambda: ours_batch(q), raw)
    results = [row("3. get_batch(100)+ack", a, b, ratio, 0.8, "raw select+delete")]

    # persist-queue and litequeue, one message at a time as their APIs work, with the
    # same backlog as ours (s.chunks * 100 waiting), as throughput over a time budget:
    # their cost per message grows with what they keep in the table, so a median of
    # single operations on a short queue would flatter them.
    backlog = s.chunks * 100
    pq = persistqueue.SQLiteAckQueue(str(tmp / "pq"), auto_commit=True, multithreading=True)
    lq = litequeue.LiteQueue(str(tmp / "lq.db"))
    text = BODY.hex()[:1024]
    for _ in range(backlog):
        pq.put(BODY)
        lq.put(text)

    def persist() -> None:
        pq.ack(pq.get(block=False))

    def lite() -> None:
        task = lq.pop()
        assert task is not None
        lq.done(task.message_id)

    pq_rate = rate_for(persist, seconds=s.foreign_seconds, limit=backlog)
    lq_rate = rate_for(lite, seconds=s.foreign_seconds, limit=backlog)
    results.append(row("3b. vs persist-queue", a, pq_rate, a / pq_rate, 100, "SQLiteAckQueue"))
    results.append(row("3c. vs litequeue", a, lq_rate, a / lq_rate, 1, "pop+done"))
    # The ceiling for 3b on this disk: raw SQLite batches of 100 against persist-queue.
    results.append(
        Result(
            name="3d. ceiling: raw select+delete vs persist-queue",
            ours=f"{b:,.0f} (raw)",
            other=f"{pq_rate:,.0f} (SQLiteAckQueue)",
            ratio=f"{b / pq_rate:.2f}x",
            target="(for comparison)",
            verdict="info",
        )
    )
    q.close()
    conn.close()
    return results


# -- 4. drain rate vs depth -------------------------------------------------------


def bench_depth(tmp: Path, s: Scale) -> Result:
    queues = {}
    for level in s.levels:
        q = DurableQueue(tmp / f"depth{level}.db", max_messages=None, max_bytes=None)
        for _ in range(level // 100):
            q.put_many("d", messages(100))
        queues[level] = q
    times: dict[int, list[float]] = {level: [] for level in s.levels}
    for r in range(s.chunks):
        # Rotate the order; refill after each timed batch to hold the depth.
        order = s.levels[r % len(s.levels) :] + s.levels[: r % len(s.levels)]
        for level in order:
            q = queues[level]
            times[level].append(ours_batch(q))
            q.put_many("d", messages(100))
    rates = {level: 100 / statistics.median(v) for level, v in times.items()}
    spread = max(rates.values()) / min(rates.values())
    for q in queues.values():
        q.close()
    return Result(
        name="4. get_batch+ack at " + " / ".join(f"{lv:,}" for lv in s.levels),
        ours=" / ".join(f"{rates[lv]:,.0f}" for lv in s.levels),
        other="-",
        ratio=f"max/min {spread:.2f}",
        target="<= 1.2",
        verdict="PASS" if spread <= 1.2 else "FAIL",
    )


# -- 5. fill-and-drain cycles -----------------------------------------------------


def on_disk(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def checkpointed(path: Path) -> int:
    """``on_disk`` once the WAL's pages are copied into the file (a passive
    checkpoint from another connection): pages only in the WAL at that moment would
    otherwise make one measurement smaller than the next for no lasting reason."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        conn.close()
    return on_disk(path)


def bench_cycles(tmp: Path, s: Scale) -> Result:
    path = tmp / "cycles.db"
    q = DurableQueue(path, max_messages=None, max_bytes=None)
    peaks = []
    for _ in range(10):
        for _ in range(s.cycle // 100):
            q.put_many("d", messages(100))
        peaks.append(checkpointed(path))
        drain_ours(q)
        peaks[-1] = max(peaks[-1], checkpointed(path))
    after = checkpointed(path)
    q.close()
    worst = max(max(peaks[1:]), after)
    ratio = worst / peaks[0]
    return Result(
        name=f"5. 10 fill/drain cycles of {s.cycle:,}",
        ours=f"{worst / 1e6:.1f} MB worst later, {after / 1e6:.1f} MB at the end",
        other=f"{peaks[0] / 1e6:.1f} MB cycle-1 peak",
        ratio=f"{ratio:.2f}x",
        target="<= 1.1x",
        verdict="PASS" if ratio <= 1.1 else "FAIL",
    )


# -- 7. an outage's backlog drained: the file shrinks, put and replay keep their speed --


def bench_outage(tmp: Path, s: Scale) -> list[Result]:
    """Fill two queues with ``s.outage`` messages and drain them, chunk by chunk in
    turn: ours (``shrink=True``, the default) and the same queue with ``shrink=False``
    (the file as it was before: freed pages kept). Totals include every vacuum."""
    chunk = 1_000
    sides = {
        "ours": DurableQueue(tmp / "outage.db", max_messages=None, max_bytes=None),
        "keep": DurableQueue(tmp / "outage-keep.db", max_messages=None, max_bytes=None,
                             shrink=False),
    }
    put = dict.fromkeys(sides, 0.0)
    replay = dict.fromkeys(sides, 0.0)
    peak = dict.fromkeys(sides, 0)

    def fill(q: DurableQueue) -> None:
        for _ in range(chunk // 100):
            q.put_many("*/orders", messages(100))

    def drain(q: DurableQueue) -> None:
        Replayer(q, "*/orders").drain(lambda batch: None, max_messages=chunk)

    for phase, work, totals in (("put", fill, put), ("replay", drain, replay)):
        for i in range(s.outage // chunk):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                started = time.perf_counter()
                work(sides[name])
                totals[name] += time.perf_counter() - started
        if phase == "put":
            peak = {name: on_disk(q.path) for name, q in sides.items()}
    after = {name: on_disk(q.path) for name, q in sides.items()}
    assert all(len(q) == 0 for q in sides.values())
    for q in sides.values():
        q.close()
    shrunk = after["ours"] / peak["ours"]
    put_ratio = put["keep"] / put["ours"]
    replay_ratio = replay["keep"] / replay["ours"]
    n = s.outage
    return [
        Result(
            name=f"7. file after a {n:,}-message backlog is drained",
            ours=f"{after['ours'] / 1e6:.1f} MB (peak {peak['ours'] / 1e6:.0f} MB)",
            other=f"{after['keep'] / 1e6:.0f} MB (shrink=False)",
            ratio=f"{shrunk:.3f}x of peak",
            target="<= 0.05x",
            verdict="PASS" if shrunk <= 0.05 else "FAIL",
        ),
        Result(
            name=f"7b. put_many(100) of the {n:,}",
            ours=f"{n / put['ours']:,.0f}",
            other=f"{n / put['keep']:,.0f} (shrink=False)",
            ratio=f"{put_ratio:.2f}x",
            target=">= 0.9x",
            verdict="PASS" if put_ratio >= 0.9 else "FAIL",
        ),
        Result(
            name=f"7c. replay of the {n:,} (vacuums included)",
            ours=f"{n / replay['ours']:,.0f}",
            other=f"{n / replay['keep']:,.0f} (shrink=False)",
            ratio=f"{replay_ratio:.2f}x",
            target=">= 0.9x",
            verdict="PASS" if replay_ratio >= 0.9 else "FAIL",
        ),
    ]


# -- 6. two producers and two replayers, two processes each -----------------------


def worker(role: str, path: str, name: str, count: str, stop: str) -> None:
    """A child process; prints a JSON summary on its last line."""
    locked = 0
    if role == "produce":
        q = DurableQueue(path, max_messages=None, max_bytes=None)
        for i in range(int(count)):
            try:
                q.put("d", Message(body=BODY, message_id=f"{name}-{i}"))
            except Exception as exc:
                locked += "locked" in str(exc)
                raise
        q.close()
        print(json.dumps({"locked": locked}))
        return
    q = DurableQueue(path, max_messages=None, max_bytes=None)
    delivered: list[str] = []
    while True:
        stopping = Path(stop).exists()
        r = Replayer(q, "d", lease_seconds=10)
        try:
            if r.acquire():
                try:
                    r.drain(lambda batch: delivered.extend(m.message_id for m in batch))
                finally:
                    r.release()
        except Exception as exc:
            if "locked" not in str(exc):
                raise
            locked += 1
        if stopping and len(q) == 0:
            break
        time.sleep(0.005)
    q.close()
    print(json.dumps({"locked": locked, "delivered": delivered}))


def foreign_worker(role: str, path: str, name: str, count: str, stop: str) -> None:
    """The same roles with persist-queue's SQLiteAckQueue on one directory."""
    import persistqueue

    locked = errors = 0
    delivered: list[str] = []
    q = persistqueue.SQLiteAckQueue(path, auto_commit=True, multithreading=True)
    deadline = time.monotonic() + 30
    if role == "produce":
        for i in range(int(count)):
            try:
                q.put(f"{name}-{i}")
            except sqlite3.OperationalError as exc:
                locked += "locked" in str(exc)
    else:
        while time.monotonic() < deadline:
            stopping = Path(stop).exists()
            try:
                item = q.get(block=False, raw=True)
                delivered.append(item["data"])
                q.ack(id=item["pqid"])
            except persistqueue.Empty:
                if stopping:
                    break
                time.sleep(0.005)
            except sqlite3.OperationalError as exc:
                locked += "locked" in str(exc)
                errors += "locked" not in str(exc)
    print(json.dumps({"locked": locked, "errors": errors, "delivered": delivered}))


def run_processes(role_prefix: str, target: str, per_producer: int, tmp: Path) -> dict[str, int]:
    stop = tmp / f"{role_prefix}stop"

    def spawn(role: str, name: str) -> subprocess.Popen[str]:
        args = [sys.executable, str(HERE), f"--{role_prefix}worker", role, target, name]
        return subprocess.Popen(
            [*args, str(per_producer), str(stop)], stdout=subprocess.PIPE, text=True
        )

    consumers = [spawn("replay", f"r{k}") for k in range(2)]
    producers = [spawn("produce", f"p{k}") for k in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in producers]
    stop.touch()
    outputs += [c.communicate(timeout=120)[0] for c in consumers]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out in outputs if out.strip()]
    delivered = [m for s in summaries for m in s.get("delivered", [])]
    expected = {f"p{k}-{i}" for k in range(2) for i in range(per_producer)}
    return {
        "duplicates": len(delivered) - len(set(delivered)),
        "lost": len(expected - set(delivered)),
        "locked": sum(s["locked"] for s in summaries) + (len(outputs) - len(summaries)),
    }


def bench_processes(tmp: Path, s: Scale) -> list[Result]:
    path = tmp / "shared.db"
    DurableQueue(path).close()
    ours = run_processes("", str(path), s.producers, tmp)
    results = [
        Result(
            name=f"6. 2 producers + 2 replayers ({2 * s.producers:,} msgs)",
            ours=f"dup {ours['duplicates']}, lost {ours['lost']}, locked {ours['locked']}",
            other="-",
            ratio="-",
            target="0 / 0 / 0",
            verdict="PASS" if not any(ours.values()) else "FAIL",
        )
    ]
    theirs = run_processes("foreign-", str(tmp / "pq-shared"), s.foreign_producers, tmp)
    results.append(
        Result(
            name=f"6b. same with persist-queue ({2 * s.foreign_producers:,} msgs)",
            ours="-",
            other=f"dup {theirs['duplicates']}, lost {theirs['lost']}, locked {theirs['locked']}",
            ratio="-",
            target="(for comparison)",
            verdict="info",
        )
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and messages")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--foreign-worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.foreign_worker:
        foreign_worker(*args.foreign_worker)
        return
    scale = QUICK if args.quick else FULL
    console = Console(width=150)
    started = time.perf_counter()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-dq-") as tmpdir:
        tmp = Path(tmpdir)
        for section in (bench_put, bench_put_many, bench_drain, bench_depth, bench_cycles):
            console.log(f"running {section.__name__}")
            out = section(tmp, scale)
            results.extend(out if isinstance(out, list) else [out])
        console.log("running bench_processes")
        results.extend(bench_processes(tmp, scale))
        console.log("running bench_outage")
        results.extend(bench_outage(tmp, scale))
    table = Table(title=f"durable_queue, 1 KiB messages ({'quick' if args.quick else 'full'})")
    for column in ("benchmark", "durable (msg/s)", "baseline (msg/s)", "ratio", "target", ""):
        table.add_column(column)
    for r in results:
        style = {"PASS": "green", "FAIL": "red"}.get(r.verdict, "dim")
        table.add_row(r.name, r.ours, r.other, r.ratio, r.target, f"[{style}]{r.verdict}[/]")
    console.print(table)
    console.print(
        f"{scale.chunks} interleaved pairs per comparison (put: {scale.put_chunk} puts each); "
        f"persist-queue and litequeue: get+ack one at a time for {scale.foreign_seconds:.0f} s "
        f"each at the same backlog ({scale.chunks * 100:,} waiting); "
        f"row 7: chunks of 1,000 taken in turn, totals; "
        f"total {time.perf_counter() - started:.0f}s"
    )


if __name__ == "__main__":
    main()
