"""Benchmark the consumer's checkpoint store on PostgreSQL against the SQLite one.

    .venv/bin/python benchmarks/bench_pg_checkpoints.py [--ops 500]

Both stores in the same run, on this machine: ``SqliteCheckpointStore`` (a temporary
file, WAL, ``synchronous=NORMAL``) and ``PostgresCheckpointStore`` on an embedded
PostgreSQL 18 server in a temporary directory with its defaults (``fsync`` on,
``synchronous_commit`` on: every commit is flushed, as on a real server), reached over
TCP on 127.0.0.1. For each store: ``--ops`` fenced checkpoint writes one after the
other; the same number spread over 16 partitions written concurrently (as a
processor's partitions checkpoint); heartbeats; a renewal of 32 claims in one batch;
a listing of 32 ownership records; and the roles store's compare-and-swap against the
role file. The floor is ours: an instance checkpointing 32 partitions every second
(the processor's default is every 100 events or 5 s) needs 32 writes a second.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gateway.consumer import (
    Checkpoint,
    CheckpointStore,
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
    PostgresCheckpointStore,
    SqliteCheckpointStore,
)
from gateway.stores import EmbeddedPostgres, PostgresRoleStore, RoleStore, RoleStoreLike
from replication import RoleState

GROUP = ConsumerGroupRef(fully_qualified_namespace="bench.servicebus.windows.net",
                         eventhub_name="telemetry")
FLOOR = 32.0  # fenced checkpoints per second


def checkpoint(pid: str, sequence: int) -> Checkpoint:
    return Checkpoint(**vars(GROUP), partition_id=pid, offset=str(sequence),
                      sequence_number=sequence)


async def rate(ops: int, run: Callable[[int], Awaitable[None]]) -> float:
    began = time.perf_counter()
    await run(ops)
    return ops / (time.perf_counter() - began)


async def measure(store: CheckpointStore, ops: int) -> dict[str, float]:
    pids = [str(p) for p in range(32)]
    won = await store.claim_ownership([Ownership(**vars(GROUP), partition_id=p, owner_id="me")
                                       for p in pids])
    assert len(won) == 32

    async def sequential(n: int) -> None:
        for i in range(n):
            await store.update_checkpoint(checkpoint("0", i), owner_id="me")

    async def concurrent(n: int) -> None:
        async def one(pid: str, count: int) -> None:
            for i in range(count):
                await store.update_checkpoint(checkpoint(pid, i), owner_id="me")
        await asyncio.gather(*(one(p, n // 16) for p in pids[:16]))

    async def beats(n: int) -> None:
        for _ in range(n):
            await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="me"))

    held = {o.partition_id: o for o in won}

    async def renewals(n: int) -> None:
        for _ in range(n):
            for record in await store.claim_ownership(list(held.values())):
                held[record.partition_id] = record

    async def listings(n: int) -> None:
        for _ in range(n):
            await store.list_ownership(GROUP)

    return {
        "fenced checkpoint, one at a time": await rate(ops, sequential),
        "fenced checkpoints, 16 partitions at once": await rate(ops // 16 * 16, concurrent),
        "heartbeat": await rate(ops, beats),
        "renew 32 claims (one batch)": await rate(max(1, ops // 10), renewals),
        "list 32 ownership records": await rate(ops, listings),
    }


def role_swaps(store: RoleStoreLike, ops: int) -> float:
    state = RoleState.initial("east", "west")
    began = time.perf_counter()
    for i in range(ops):
        new = state.swap(float(i))
        state = store.swap(state, new)
    return ops / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp:
        root = Path(tmp)
        server = EmbeddedPostgres(root / "pg")  # fsync on: durable commits
        server.start()
        try:
            results = asyncio.run(run_all(root, server.dsn, args.ops))
            pg_roles = PostgresRoleStore(server.dsn, schema="bench_roles")
            try:
                results["role compare-and-swap"] = (
                    role_swaps(RoleStore(root / "roles.json"), args.ops),
                    role_swaps(pg_roles, args.ops))
            finally:
                pg_roles.close()
        finally:
            server.stop()
    table = Table(title=f"Checkpoint and role stores, {args.ops} operations each (per second)")
    for column in ("operation", "SQLite / file", "PostgreSQL", "PG / SQLite", "floor"):
        table.add_column(column, justify="right")
    for name, (lite, pg) in results.items():
        floor = f">= {FLOOR:.0f}/s {'PASS' if pg >= FLOOR else 'FAIL'}" \
            if name.startswith("fenced") else ""
        table.add_row(name, f"{lite:,.0f}", f"{pg:,.0f}", f"{pg / lite:.2f}x", floor)
    Console(width=120).print(table)


async def run_all(root: Path, dsn: str, ops: int) -> dict[str, tuple[float, float]]:
    async with SqliteCheckpointStore(root / "checkpoints.db") as lite:
        sqlite = await measure(lite, ops)
    async with PostgresCheckpointStore(dsn, schema="bench") as pg:
        postgres = await measure(pg, ops)
    return {name: (sqlite[name], postgres[name]) for name in sqlite}


if __name__ == "__main__":
    main()
