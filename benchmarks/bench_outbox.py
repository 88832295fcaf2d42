"""Benchmark outbox dispatch against sending the same messages directly.

    .venv/bin/python benchmarks/bench_outbox.py [--messages 20000] [--rounds 3]
        [--chunk 2000] [--dsn DSN]

The same messages of 1 KiB (built once, before any timing) go to a queue of local
namespaces (passive mode) in two ways, in the same run:

* **direct**: ``await AsyncGeoSender.send_batch(batch)`` for batches of 100;
* **outbox dispatch**: the messages were added to the outbox first (untimed: the
  application's transactions, 100 rows each, timed separately as *add*), then an
  ``AsyncOutboxDispatcher`` (``batch_size=100``) sends them through a sender of its
  own, each batch claimed, sent with one ``send_batch`` and deleted, until the rows
  added are sent.

The machine is shared and its load moves within seconds, so the two are timed back to
back on each chunk of ``--chunk`` messages (the order alternating), each with its own
namespaces, and the ratio is taken per chunk. For the SQLite outbox (the application's
file, WAL mode) and the PostgreSQL outbox (an embedded server with fsync on, started in
a temporary directory; or ``--dsn``); each round has a fresh outbox and namespaces. The
table shows medians over all chunks of all rounds (the ratio's quartiles beside it).
Target: >= 0.7x.

Beside them, the CPU time of this process per message each way, and their ratio (the
same chunks): what the load on a shared machine moves much less than the wall-clock
rates. PostgreSQL's own work runs in its server's processes and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gateway.aio import AsyncGeoSender, AsyncOutboxDispatcher
from gateway.stores import EmbeddedPostgres, PostgresOutbox, SqliteOutbox
from gateway.transports.local import LocalNamespace
from replication import Message

ENTITY = "bench"
BATCH = 100
BODY = 1024
TARGET = 0.7


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def namespaces(root: Path) -> Path:
    data = root / f"ns-{uuid.uuid4().hex[:8]}"
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data) as ns:
            ns.create_queue(ENTITY)
    return data


def sender(data: Path) -> AsyncGeoSender:
    return AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                          entity=ENTITY, data_dir=data, state_dir=data / "state",
                          recovery=False)


class Store:
    """Makes fresh outboxes of one kind, and adds rows the application's way."""

    def __init__(self, kind: str, root: Path, dsn: str | None) -> None:
        self.kind, self.root, self.dsn = kind, root, dsn

    def fresh(self) -> SqliteOutbox | PostgresOutbox:
        if self.kind == "sqlite":
            return SqliteOutbox(self.root / f"app-{uuid.uuid4().hex[:8]}.db")
        assert self.dsn is not None
        return PostgresOutbox(self.dsn, schema=f"bench_{uuid.uuid4().hex[:10]}")

    def add(self, outbox: SqliteOutbox | PostgresOutbox, messages: list[Message]) -> float:
        """Seconds to add ``messages`` in transactions of 100 (the application's side)."""
        started = time.perf_counter()
        if isinstance(outbox, SqliteOutbox):
            import sqlite3

            conn = sqlite3.connect(outbox.path)
            for i in range(0, len(messages), BATCH):
                with conn:
                    outbox.add_many(conn, messages[i:i + BATCH], entity=ENTITY)
            conn.close()
        else:
            import psycopg

            assert self.dsn is not None
            with psycopg.connect(self.dsn) as pconn:
                for i in range(0, len(messages), BATCH):
                    with pconn.transaction():
                        outbox.add_many(pconn, messages[i:i + BATCH], entity=ENTITY)
        return time.perf_counter() - started

    def drop(self, outbox: SqliteOutbox | PostgresOutbox) -> None:
        if isinstance(outbox, PostgresOutbox):
            import psycopg

            assert self.dsn is not None
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {outbox.schema} CASCADE")
        outbox.close()


async def send_direct(sender: AsyncGeoSender, part: list[Message]) -> tuple[float, float]:
    """Seconds (wall-clock, and this process's CPU) to send ``part`` in batches of 100,
    straight."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(part), BATCH):
        await sender.send_batch(part[i:i + BATCH])
    return time.perf_counter() - started, time.process_time() - cpu


async def send_dispatched(dispatcher: AsyncOutboxDispatcher, count: int) -> tuple[float, float]:
    """Seconds (wall-clock, and this process's CPU) for the dispatcher to send (and
    delete) the ``count`` rows waiting."""
    started, cpu = time.perf_counter(), time.process_time()
    target = dispatcher.stats.sent + count
    while dispatcher.stats.sent < target:
        await dispatcher.dispatch_once()
    return time.perf_counter() - started, time.process_time() - cpu


async def measure(store: Store, messages: list[Message], rounds: int,
                  chunk: int) -> dict[str, list[float]]:
    """Per chunk of messages: the direct send and the dispatch of the same messages,
    back to back (which goes first alternates), so both meet the same load."""
    results: dict[str, list[float]] = {"direct": [], "dispatch": [], "add": [], "ratio": [],
                                       "direct_cpu": [], "dispatch_cpu": [], "cpu_ratio": []}
    for _ in range(rounds):
        outbox = store.fresh()
        try:
            async with sender(namespaces(store.root)) as straight, \
                    sender(namespaces(store.root)) as through:
                for s in (straight, through):
                    await s.send_batch([Message(b"warm-up")])
                dispatcher = AsyncOutboxDispatcher(outbox, through, batch_size=BATCH,
                                                   concurrency=1)
                for n, start in enumerate(range(0, len(messages), chunk)):
                    part = messages[start:start + chunk]
                    added = await asyncio.to_thread(store.add, outbox, part)
                    if n % 2 == 0:
                        direct, direct_cpu = await send_direct(straight, part)
                        dispatched, dispatch_cpu = await send_dispatched(dispatcher, len(part))
                    else:
                        dispatched, dispatch_cpu = await send_dispatched(dispatcher, len(part))
                        direct, direct_cpu = await send_direct(straight, part)
                    results["direct"].append(len(part) / direct)
                    results["dispatch"].append(len(part) / dispatched)
                    results["add"].append(len(part) / added)
                    results["ratio"].append(direct / dispatched)
                    results["direct_cpu"].append(direct_cpu / len(part) * 1e6)
                    results["dispatch_cpu"].append(dispatch_cpu / len(part) * 1e6)
                    results["cpu_ratio"].append(direct_cpu / dispatch_cpu)
        finally:
            store.drop(outbox)
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=2_000,
                        help="messages timed each way back to back")
    parser.add_argument("--dsn", help="a PostgreSQL server to use instead of an embedded one")
    args = parser.parse_args()
    body = b"x" * BODY
    messages = [Message(body, message_id=f"bench-{i:08d}") for i in range(args.messages)]
    console = Console(width=200)
    table = Table(title=f"outbox dispatch vs direct send_batch: {args.messages} messages of "
                        f"{BODY} B, batches of {BATCH}, {args.rounds} rounds, medians over "
                        f"the chunks of {args.chunk}")
    for column in ("outbox", "direct msg/s", "dispatch msg/s", "dispatch / direct",
                   "target", "result", "add msg/s (context)",
                   "CPU µs/msg direct / dispatch (ratio)"):
        table.add_column(column)
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as tmp:
        root = Path(tmp)
        server = None
        dsn = args.dsn
        if dsn is None:
            server = EmbeddedPostgres(root / "pg")  # fsync on: commits as a real server's
            dsn = await asyncio.to_thread(server.start)
        try:
            for kind in ("sqlite", "postgres"):
                got = await measure(Store(kind, root, dsn), messages, args.rounds, args.chunk)
                ratio = statistics.median(got["ratio"])
                table.add_row(
                    kind, f"{statistics.median(got['direct']):,.0f}",
                    f"{statistics.median(got['dispatch']):,.0f}",
                    f"{ratio:.2f}x (p25 {quantile(got['ratio'], 0.25):.2f}, "
                    f"p75 {quantile(got['ratio'], 0.75):.2f})",
                    f">= {TARGET}x", "PASS" if ratio >= TARGET else "FAIL",
                    f"{statistics.median(got['add']):,.0f}",
                    f"{statistics.median(got['direct_cpu']):.1f} / "
                    f"{statistics.median(got['dispatch_cpu']):.1f} "
                    f"({statistics.median(got['cpu_ratio']):.2f}x)")
        finally:
            if server is not None:
                await asyncio.to_thread(server.stop)
    console.print(table)


if __name__ == "__main__":
    asyncio.run(main())
