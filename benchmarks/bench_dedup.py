"""Benchmark the MessageId de-duplicator with a full window.

    .venv/bin/python benchmarks/bench_dedup.py [--ids 1000000] [--probe 20000]

Fills a ``Deduplicator`` over a ``SqliteDedupStore`` (a temporary file, WAL,
synchronous=NORMAL) with ``--ids`` done ids in batches of 1,000, then measures
checks per second for new ids and for duplicates, through ``check_many`` batches of
100 and through single ``check`` calls. Memory of the window is the growth of the
process's RSS (``/proc/self/statm``, after ``malloc_trim(0)``; the untrimmed figure
is shown too) over the fill, so it includes SQLite's page cache (about 2 MB); the
exact size of the front's arrays is shown next to it. ``tracemalloc`` would slow
the fill down 4.5x, so it is used only for the reference: a plain Python ``set``
of the same str ids, built in the same run after the window was measured (RSS and
tracemalloc both shown).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gateway.stores._dedup import SqliteDedupStore
from replication._dedup import Deduplicator, DedupWindow, Verdict

DELIVER, DUPLICATE = Verdict.DELIVER, Verdict.DUPLICATE
TARGET_MB_PER_MILLION = 50.0
# Throughput floors are ours, not the brief's: a receiver pulling a few thousand
# messages per second per process must not be slowed down by de-duplication.
FLOOR_BATCH = 10_000.0
FLOOR_SINGLE = 2_000.0


def ids(start: int, stop: int) -> list[str]:
    # 32 hex characters, like the default MessageId (uuid4().hex).
    return [f"{i:032x}" for i in range(start, stop)]


def rss_bytes(*, trim: bool = True) -> int:
    """Resident set size; first hand freed heap back to the OS where glibc allows.

    Growing the front's arrays frees the old ones; glibc keeps such freed blocks in
    its heap (its mmap threshold adapts upwards), where they count in the RSS but
    are free for the process to reuse. ``malloc_trim(0)`` returns them.
    """
    if trim:
        gc.collect()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fill(dedup: Deduplicator, n: int) -> float:
    started = time.perf_counter()
    for lo in range(0, n, 1000):
        batch = ids(lo, min(lo + 1000, n))
        dedup.check_many(batch)
        dedup.succeeded_many(batch)
    return time.perf_counter() - started


def rate(n: int, run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return n / (time.perf_counter() - started)


def measured(name: str, per_s: float, floor: float) -> tuple[str, str, str, str]:
    ok = "PASS" if per_s >= floor else "FAIL"
    return (name, f"{per_s:,.0f} /s", f">= {floor:,.0f} /s", ok)


def batched(dedup: Deduplicator, batch_ids: list[str], expect: Verdict) -> None:
    for lo in range(0, len(batch_ids), 100):
        verdicts = dedup.check_many(batch_ids[lo : lo + 100])
        assert all(v is expect for v in verdicts), "unexpected verdict"


def single(dedup: Deduplicator, single_ids: list[str], expect: Verdict) -> None:
    for message_id in single_ids:
        assert dedup.check(message_id) is expect, "unexpected verdict"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000, help="ids in the window")
    parser.add_argument("--probe", type=int, default=20_000, help="ids per measurement")
    args = parser.parse_args()
    n, probe = args.ids, args.probe
    console = Console()
    rows: list[tuple[str, str, str, str]] = []

    with tempfile.TemporaryDirectory() as tmp:
        window = DedupWindow(seconds=7 * 24 * 3600.0, count=n)
        store = SqliteDedupStore(Path(tmp) / "dedup.sqlite", window=window)
        rss0 = rss_bytes()
        dedup = Deduplicator(store)
        fill_s = fill(dedup, n)
        untrimmed_mb = (rss_bytes(trim=False) - rss0) / 1e6
        front_mb = (rss_bytes() - rss0) / 1e6
        per_million = front_mb * 1e6 / n
        arrays_mb = dedup._front.nbytes / 1e6
        console.print(f"filled {n:,} ids in {fill_s:.1f} s ({n / fill_s:,.0f} ids/s)")

        # The window is full, so each new id below also evicts the oldest.
        new = ids(n, n + 4 * probe)
        dup = ids(n - probe, n)
        quarter = probe // 4

        def succeed_all() -> None:
            for lo in range(0, probe, 100):
                dedup.succeeded_many(new[lo : lo + 100])

        measurements: list[tuple[str, int, Callable[[], object]]] = [
            ("check_many(100), new ids", probe, lambda: batched(dedup, new[:probe], DELIVER)),
            ("succeeded_many(100)", probe, succeed_all),
            ("check_many(100), duplicates", probe, lambda: batched(dedup, dup, DUPLICATE)),
            ("check, new id", quarter, lambda: single(dedup, new[probe:][:quarter], DELIVER)),
            ("check, duplicate", probe, lambda: single(dedup, dup, DUPLICATE)),
        ]
        for name, count, run in measurements:
            floor = FLOOR_SINGLE if name.startswith("check,") else FLOOR_BATCH
            rows.append(measured(name, rate(count, run), floor))
        # Another process (or a restart): an empty front, duplicates found on disk.
        other = Deduplicator(SqliteDedupStore(Path(tmp) / "dedup.sqlite", window=window))
        per_s = rate(probe, lambda: batched(other, dup, DUPLICATE))
        rows.append(measured("check_many(100), dups on disk only", per_s, FLOOR_BATCH))
        other.close()
        dedup.close()

    # The reference: a plain set of the same str ids, in the same process.
    # Built twice: tracemalloc's own bookkeeping would show in the RSS.
    rss0 = rss_bytes()
    plain = set(ids(0, n))
    set_rss_mb = (rss_bytes() - rss0) / 1e6
    del plain
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    plain = set(ids(0, n))
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    set_mb = (used - base) / 1e6
    del plain

    target = TARGET_MB_PER_MILLION * n / 1e6
    ok = "PASS" if front_mb <= target else "FAIL"
    rows[:0] = [
        (f"window memory, {n:,} ids (RSS growth)", f"{front_mb:.1f} MB", f"<= {target:.1f} MB", ok),
        ("  per million ids", f"{per_million:.1f} MB", f"<= {TARGET_MB_PER_MILLION:.0f} MB", ok),
        ("  of which the front's arrays", f"{arrays_mb:.1f} MB", "", ""),
        ("  RSS growth before malloc_trim", f"{untrimmed_mb:.1f} MB", "", ""),
        (f"reference: set of {n:,} str ids, RSS", f"{set_rss_mb:.1f} MB", "", ""),
        ("  same set, tracemalloc", f"{set_mb:.1f} MB", "", ""),
    ]  # fmt: skip

    table = Table(title=f"MessageId de-duplicator, window of {n:,} ids, SQLite store")
    for column in ("measure", "result", "target", ""):
        table.add_column(column, justify="right" if column else "left")
    for row in rows:
        style = "green" if row[3] == "PASS" else "red" if row[3] == "FAIL" else None
        table.add_row(*row, style=style)
    console.print(table)


if __name__ == "__main__":
    main()
