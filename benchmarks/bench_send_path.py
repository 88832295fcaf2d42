"""Benchmark the send path on local namespaces: messages/s and the gateway's overhead.

    .venv/bin/python benchmarks/bench_send_path.py [--rounds 5] [--cycles 10] [--chunk 10]
        [--single-chunk 50]

Sends batches of 100 messages of 1 KiB (the same ``Message`` list, built once
before any timing, for every variant) through each variant below. Every variant
gets its own fresh local namespaces in one temporary directory (queue created, one
untimed warm-up send), all set up at the start in one event loop. Timing is
interleaved: a round is ``--cycles`` rotations through all variants, each sending
``--chunk`` batches in turn, the order rotated every time. The table shows the
median messages/s over ``--rounds`` rounds and the median of the per-round
overheads (variant time / reference time in the same round - 1).

Like is compared with like: passive sends go to one namespace, so they are
compared with ``LocalTransport.send`` on one namespace; active sends go to both,
so they are compared with ``asyncio.gather`` of two ``LocalTransport.send`` on two
namespaces. The sync ``GeoSender`` crosses to its event loop thread on every call;
it is compared with the same one-namespace async reference, and the thread hop
alone (a blocking portal calling ``LocalTransport.send``) is shown beside it.

A second table does the same with single messages, one ``send(message)`` per call as
the README shows (``--single-chunk`` sends per chunk): the raw path is
``await LocalTransport.send(entity, [message])`` on one namespace in a running loop,
the transport driven directly with no gateway and no thread of the caller's
(target for the sync ``GeoSender.send``: <= 1.3x of it). For context, the floor
below any async transport: the namespace's SQLite ``Store.send`` called in the
caller's own thread, no thread crossing at all; and the sync sender with its SQLite
work handed to a worker thread instead of run on its own loop thread.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anyio.from_thread import start_blocking_portal
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.geo._client import GeoSender
from gateway.geo.sender._sender import AsyncGeoSender
from gateway.transports.local import LocalNamespace, LocalTransport
from gateway.transports.local._store import Store
from replication import Message

ENTITY = "bench"
BATCH = 100
BODY = 1024
TARGET = 0.15  # the brief: the gateway's overhead over the local transport <= 15%
TARGET_SINGLE = 0.30  # sync GeoSender.send(message) <= 1.3x the raw single send



def make_namespaces(root: Path, *names: str) -> None:
    for name in names:
        with LocalNamespace(name, data_dir=root) as ns:
            ns.create_queue(ENTITY)


class Runner:
    """One variant: set up on fresh namespaces, then timed chunks of ``send`` calls."""

    async def setup(self, root: Path, batch: list[Message]) -> None:
        raise NotImplementedError

    async def send(self, batch: list[Message]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def chunk(self, batch: list[Message], n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            await self.send(batch)
        return time.perf_counter() - started


# -- the references -----------------------------------------------------------------


class RefOne(Runner):
    """``LocalTransport.send`` on one namespace, awaited directly."""

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary")
        self.transport = LocalTransport("primary", data_dir=root)
        await self.transport.send(ENTITY, batch)  # warm-up: opens the file, starts the worker

    async def send(self, batch: list[Message]) -> None:
        await self.transport.send(ENTITY, batch)

    async def close(self) -> None:
        await self.transport.aclose()


class RefTwo(Runner):
    """``asyncio.gather`` of ``LocalTransport.send`` on two namespaces."""

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary", "secondary")
        self.one = LocalTransport("primary", data_dir=root)
        self.two = LocalTransport("secondary", data_dir=root)
        await self.send(batch)

    async def send(self, batch: list[Message]) -> None:
        await asyncio.gather(self.one.send(ENTITY, batch), self.two.send(ENTITY, batch))

    async def close(self) -> None:
        await self.one.aclose()
        await self.two.aclose()


class ThreadHop(Runner):
    """What any sync driver pays: a blocking portal call per send, no gateway.

    Called from the benchmark's own loop thread, which blocks meanwhile exactly as
    a plain sync caller would (nothing else runs on it during the chunk).
    """

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary")
        self.transport = LocalTransport("primary", data_dir=root)
        self.portal_cm = start_blocking_portal(backend="asyncio")
        self.portal = self.portal_cm.__enter__()
        self.portal.call(self.transport.send, ENTITY, batch)

    async def chunk(self, batch: list[Message], n: int) -> float:
        call, send = self.portal.call, self.transport.send
        started = time.perf_counter()
        for _ in range(n):
            call(send, ENTITY, batch)
        return time.perf_counter() - started

    async def close(self) -> None:
        self.portal.call(self.transport.aclose)
        self.portal_cm.__exit__(None, None, None)


class StoreDirect(Runner):
    """No thread at all: the local namespace's SQLite ``Store.send`` called in the
    caller's thread (what no async transport can do; the floor, for context)."""

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary")
        self.store = Store(LocalTransport("primary", data_dir=root).path,
                           namespace="primary", auto_create=False)
        self.store.send(ENTITY, batch, time.time())

    async def chunk(self, batch: list[Message], n: int) -> float:
        send = self.store.send
        started = time.perf_counter()
        for _ in range(n):
            send(ENTITY, batch, time.time())
        return time.perf_counter() - started

    async def close(self) -> None:
        self.store.close()


# -- the gateway ----------------------------------------------------------------------


class Gateway(Runner):
    """``AsyncGeoSender.send_batch`` with the default policy (recovery task running)."""

    def __init__(self, mode: str, *, durable_queue: bool, single: bool = False) -> None:
        self.mode, self.durable_queue, self.single = mode, durable_queue, single

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary", "secondary")
        self.sender = AsyncGeoSender(
            primary="local://primary", secondary="local://secondary", entity=ENTITY,
            mode=self.mode, data_dir=root, state_dir=root / "state",
            durable_queue=root / "buffer.db" if self.durable_queue else None,
        )
        await self.sender.start()
        await self.sender.send_batch(batch)

    async def send(self, batch: list[Message]) -> None:
        if self.single:
            await self.sender.send(batch[0])
        else:
            await self.sender.send_batch(batch)

    async def close(self) -> None:
        assert not self.sender.down and not self.sender.backlog, "a namespace failed"
        await self.sender.aclose()


class _WorkerThreadGeoSender(GeoSender):
    """``GeoSender`` with its local SQLite work in a worker thread, as before it ran
    on the sender's own loop thread (for the comparison only)."""

    _inline_io = False


class SyncGateway(Runner):
    """``GeoSender.send_batch`` (passive), blocking, as in ``ThreadHop``; with
    ``single``, ``GeoSender.send(message)``."""

    def __init__(self, *, single: bool = False, inline_io: bool = True) -> None:
        self.single = single
        self.driver = GeoSender if inline_io else _WorkerThreadGeoSender

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root, "primary", "secondary")
        self.sender = self.driver(
            primary="local://primary", secondary="local://secondary", entity=ENTITY,
            mode="passive", data_dir=root, state_dir=root / "state",
        )
        self.sender.send_batch(batch)

    async def chunk(self, batch: list[Message], n: int) -> float:
        send_batch, send, first = self.sender.send_batch, self.sender.send, batch[0]
        started = time.perf_counter()
        if self.single:
            for _ in range(n):
                send(first)
        else:
            for _ in range(n):
                send_batch(batch)
        return time.perf_counter() - started

    async def close(self) -> None:
        assert not self.sender.backlog, "a namespace failed"
        self.sender.close()


@dataclass(frozen=True)
class Variant:
    name: str
    runner: Callable[[], Runner]
    reference: str | None  # the name of the variant it is compared with
    target: bool = True  # judged against the table's target


REF_ONE = "ref 1: LocalTransport.send, 1 namespace"
REF_S = "raw: await LocalTransport.send([m])"
SYNC_S = "sync GeoSender.send(m) (passive)"
HOP_S = "thread hop alone: portal.call(send, [m])"
FLOOR_S = "floor: Store.send in the caller's thread"
WORKER_S = "sync GeoSender.send(m), SQLite in a worker"
REF_TWO = "ref 2: gather(2 x LocalTransport.send)"
SYNC = "sync GeoSender.send_batch (passive)"
HOP = "thread hop alone: portal.call(send)"
SHORT = {REF_ONE: "ref 1", REF_TWO: "ref 2", HOP: "hop", REF_S: "raw", HOP_S: "hop",
         FLOOR_S: "floor", WORKER_S: "worker"}
# Extra rows: (label, variant, reference), shown after the reference's own row.
EXTRA = {HOP: ("sync GeoSender vs the thread hop alone", SYNC, HOP),
         HOP_S: ("sync GeoSender.send vs the thread hop alone", SYNC_S, HOP_S),
         FLOOR_S: ("sync GeoSender.send vs that floor", SYNC_S, FLOOR_S),
         WORKER_S: ("sync GeoSender.send vs SQLite in a worker", SYNC_S, WORKER_S)}
VARIANTS = [
    Variant(REF_ONE, RefOne, None),
    Variant("passive AsyncGeoSender.send_batch",
            lambda: Gateway("passive", durable_queue=False), REF_ONE),
    Variant("passive, durable_queue set (unused)",
            lambda: Gateway("passive", durable_queue=True), REF_ONE),
    Variant(SYNC, SyncGateway, REF_ONE),
    Variant(HOP, ThreadHop, REF_ONE, target=False),
    Variant(REF_TWO, RefTwo, None),
    Variant("active AsyncGeoSender.send_batch",
            lambda: Gateway("active", durable_queue=False), REF_TWO),
    Variant("active, durable_queue set (unused)",
            lambda: Gateway("active", durable_queue=True), REF_TWO),
]
# Single messages: only the sync driver is judged (<= 1.3x); the rest is context.
SINGLE_VARIANTS = [
    Variant(REF_S, RefOne, None),
    Variant("async AsyncGeoSender.send(m) (passive)",
            lambda: Gateway("passive", durable_queue=False, single=True), REF_S, target=False),
    Variant(SYNC_S, lambda: SyncGateway(single=True), REF_S),
    Variant(HOP_S, ThreadHop, REF_S, target=False),
    Variant(FLOOR_S, StoreDirect, REF_S, target=False),
    Variant(WORKER_S, lambda: SyncGateway(single=True, inline_io=False), REF_S, target=False),
]


async def measure(
    variants: list[Variant], root: Path, batch: list[Message], rounds: int, cycles: int,
    chunk: int,
) -> dict[str, list[float]]:
    """Seconds per variant per round; each round is ``cycles`` rotations of chunks."""
    runners: dict[str, Runner] = {}
    for i, variant in enumerate(variants):
        runners[variant.name] = variant.runner()
        await runners[variant.name].setup(root / f"v{i}", batch)
    seconds: dict[str, list[float]] = {v.name: [] for v in variants}
    names = [v.name for v in variants]
    try:
        for _ in range(rounds):
            spent = dict.fromkeys(names, 0.0)
            for c in range(cycles):
                shift = c % len(names)
                for name in names[shift:] + names[:shift]:
                    spent[name] += await runners[name].chunk(batch, chunk)
            for name in names:
                seconds[name].append(spent[name])
    finally:
        for runner in runners.values():
            await runner.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians over these)")
    parser.add_argument("--cycles", type=int, default=10,
                        help="rotations through all variants per round")
    parser.add_argument("--chunk", type=int, default=10,
                        help="batches per variant per rotation")
    parser.add_argument("--single-chunk", type=int, default=50,
                        help="single-message sends per variant per rotation")
    args = parser.parse_args()
    console = Console(width=120)
    # Built once, outside every timed loop, and shared by all variants.
    batch = [Message(os.urandom(BODY), message_id=f"bench-{i:05d}") for i in range(BATCH)]
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
        seconds = asyncio.run(measure(VARIANTS, Path(tmp) / "batches", batch, args.rounds,
                                      args.cycles, args.chunk))
        single = asyncio.run(measure(SINGLE_VARIANTS, Path(tmp) / "single", batch[:1],
                                     args.rounds, args.cycles, args.single_chunk))
    per_round = args.cycles * args.chunk
    console.print(render(
        f"Send path on local namespaces: batches of {BATCH} x {BODY} B, "
        f"{per_round} batches per variant per round, median of {args.rounds} rounds",
        VARIANTS, seconds, per_round * BATCH, TARGET))
    per_round = args.cycles * args.single_chunk
    console.print(render(
        f"Single messages of {BODY} B, one send per call, {per_round} sends per variant "
        f"per round, median of {args.rounds} rounds", SINGLE_VARIANTS, single, per_round,
        TARGET_SINGLE))


def render(title: str, variants: list[Variant], seconds: dict[str, list[float]],
           messages: int, target: float) -> Table:
    """The table: msgs/s, and each variant's time / its reference's in the same round."""
    table = Table(title=title)
    for column, justify in (("variant", "left"), ("msgs/s", "right"),
                            ("overhead vs reference [per round]", "right"),
                            ("target", "right"), ("", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    rows: list[tuple[str, str, str | None, bool]] = []
    for variant in variants:
        rows.append((variant.name, variant.name, variant.reference, variant.target))
        if variant.name in EXTRA:
            rows.append((*EXTRA[variant.name], False))
    for label, name, reference, judged in rows:
        times = seconds[name]
        rate = statistics.median(messages / t for t in times)
        if reference is None:
            table.add_row(escape(label), f"{rate:,.0f}", "", "", "", style="bold")
            continue
        ratios = [t / ref - 1 for t, ref in zip(times, seconds[reference], strict=True)]
        overhead = statistics.median(ratios)
        spread = ", ".join(f"{r:+.0%}" for r in ratios)
        if judged:
            ok, goal = ("PASS" if overhead <= target else "FAIL"), f"<= {target:.0%}"
        else:
            ok, goal = "", "(context)"
        table.add_row(
            escape(label), f"{rate:,.0f}",
            escape(f"{overhead:+.1%} vs {SHORT[reference]} [{spread}]"), goal, ok,
            style="green" if ok == "PASS" else "red" if ok == "FAIL" else None,
        )
    return table


if __name__ == "__main__":
    main()
