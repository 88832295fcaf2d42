"""Benchmark the receive path on local namespaces: the gateway's receiver against the
raw receive+complete loop on the same local transport, in the same run.

    .venv/bin/python benchmarks/bench_receive.py [--rounds 5] [--cycles 4] [--messages 500]
        [--batch 100] [--only TEXT]

Every variant gets its own local namespaces (and its own SQLite dedup store) in one
temporary directory; their transports are opened and warmed up once. A round is
``--cycles`` cycles; a cycle fills every variant's queues with ``--messages`` new
messages of 1 KiB (untimed; fresh ``MessageId``s every cycle, so that nothing is a
duplicate of an earlier one) and then times each variant draining its queues, the
order rotated every cycle (the process's CPU time during each drain is kept too, and
shown as context: on a shared machine it moves less with other jobs than the time does).
A gateway receiver is opened (untimed, on the warm transports) just before its timed
drain and closed just after it: its pumps start inside the timed part, so no message is
prefetched for free. The table shows the
median messages/s over ``--rounds`` rounds and the median of the per-round ratios
(variant time / reference time in the same round).

Like is compared with like:

- one copy (the messages are in the primary only, as after passive sends): the raw
  loop is ``LocalTransport.receive(max_messages=batch)`` then ``complete`` of each
  message on the primary; the gateway receives from both namespaces (the secondary is
  empty) through ``AsyncGeoReceiver`` with a ``SqliteDedupStore``;
- two copies (active sends: every message in both namespaces): the raw loop drains
  both namespaces (twice the messages, no de-duplication); the gateway delivers each
  id once and completes the other copy as a duplicate.

The gateway is driven as an application would: ``receive(max_messages=batch)`` then
``await complete(m)`` for each, or ``run(handler)`` with a coroutine handler that
does nothing, or ``run(handler)`` with a plain (sync) handler that does nothing; and
the sync ``GeoReceiver`` the same ways from a plain thread: ``receive`` + ``complete``,
and ``run`` with a plain handler. Every row is judged: target <= 1.3x. The gateway's
receivers complete the messages of a group on a local namespace in one call
(``LocalTransport.complete_many``); the raw loops that do the same ("raw 1g", "raw 2g")
are context, and each gateway row's time against them is shown too: what the gateway
adds beyond the grouping (the de-duplication, the thread crossings). A sync
``GeoReceiver`` is made (untimed) for each drain, like the async receivers; it opens
its own transports on its own loop thread.
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

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.geo._client import GeoReceiver
from gateway.geo.receiver._receiver import AsyncGeoReceiver, ReceiverStats
from gateway.transports.base import ReceivedMessage
from gateway.transports.local import LocalNamespace, LocalTransport
from replication import Message

ENTITY = "bench"
BODY = 1024
TARGET = 1.3  # the brief: the receiver <= 1.3x the raw receive+complete loop
NAMES = ("primary", "secondary")


class Runner:
    """One variant: its own namespaces, filled each round, then drained (timed)."""

    copies = 1  # namespaces each message is put in

    def __init__(self, batch: int) -> None:
        self.batch = batch

    async def setup(self, root: Path) -> None:
        self.root = root
        for name in NAMES:
            with LocalNamespace(name, data_dir=root) as ns:
                ns.create_queue(ENTITY)
        self.senders = [LocalTransport(n, data_dir=root) for n in NAMES[: self.copies]]

    async def fill(self, messages: list[Message]) -> None:
        for sender in self.senders:
            for i in range(0, len(messages), 100):
                await sender.send(ENTITY, messages[i : i + 100])

    async def drain(self, n: int) -> float:
        raise NotImplementedError

    async def close(self) -> None:
        for sender in self.senders:
            await sender.aclose()


class Raw(Runner):
    """``receive(max_messages=batch)`` + ``complete`` of each, namespace by namespace."""

    async def setup(self, root: Path) -> None:
        await super().setup(root)
        self.transports = [LocalTransport(n, data_dir=root) for n in NAMES[: self.copies]]
        for t in self.transports:  # warm-up: opens the file, starts the worker
            await t.receive(ENTITY, max_messages=1)

    async def drain(self, n: int) -> float:
        started = time.perf_counter()
        done = 0
        for t in self.transports:
            while True:
                got = await t.receive(ENTITY, max_messages=self.batch, max_wait=0.0)
                if not got:
                    break
                await self.settle(t, got)
                done += len(got)
        elapsed = time.perf_counter() - started
        assert done == n * self.copies, f"raw drained {done} of {n * self.copies}"
        return elapsed

    async def settle(self, transport: LocalTransport, got: list[ReceivedMessage]) -> None:
        for received in got:
            await transport.complete(received)

    async def close(self) -> None:
        await super().close()
        for t in self.transports:
            await t.aclose()


class RawTwo(Raw):
    copies = 2


class Grouped(Raw):
    """The raw loop completing each received batch in one call
    (``LocalTransport.complete_many``, one transaction), as the gateway's receivers do."""

    async def settle(self, transport: LocalTransport, got: list[ReceivedMessage]) -> None:
        assert not any(await transport.complete_many(got)), "a lock was lost"


class GroupedTwo(Grouped):
    copies = 2


class Gateway(Runner):
    """``AsyncGeoReceiver``: ``receive`` + ``complete`` each, or ``run(handler)`` (a
    coroutine handler, or with ``plain`` a sync one)."""

    def __init__(self, batch: int, *, use_run: bool, copies: int = 1,
                 plain: bool = False) -> None:
        super().__init__(batch)
        self.use_run, self.copies, self.plain = use_run, copies, plain

    async def setup(self, root: Path) -> None:
        await super().setup(root)
        self.transports = [LocalTransport(n, data_dir=root) for n in NAMES]
        for t in self.transports:  # warm-up: opens the file, starts the worker
            await t.receive(ENTITY, max_messages=1)

    async def drain(self, n: int) -> float:
        receiver = AsyncGeoReceiver(
            primary=self.transports[0], secondary=self.transports[1], entity=ENTITY,
            dedup_store=self.root / "dedup.db", poll_wait=0.05,
        )
        before = receiver.stats
        # Done when every id was delivered and every second copy completed as a duplicate.
        until = _Until(receiver, before, n, n * (self.copies - 1))
        started = time.perf_counter()
        if self.use_run:
            await receiver.run(_nothing if self.plain else _noop, max_messages=self.batch,
                               stop=until)
        else:
            while not until.is_set():
                for received in await receiver.receive(self.batch, max_wait=0.05):
                    await receiver.complete(received)
        elapsed = time.perf_counter() - started
        stats = receiver.stats
        await receiver.aclose()
        assert stats.delivered == n, "a message went missing"
        assert stats.completed == n, "a message was not completed"
        return elapsed

    async def close(self) -> None:
        await super().close()
        for t in self.transports:
            await t.aclose()


async def _noop(message: ReceivedMessage) -> None:
    return None


def _nothing(message: ReceivedMessage) -> None:
    return None


class _Until:
    """A stop flag for ``run``: set once the counts since ``before`` reach the goal."""

    def __init__(self, receiver: AsyncGeoReceiver | GeoReceiver, before: ReceiverStats,
                 delivered: int, duplicates: int) -> None:
        self.receiver, self.before = receiver, before
        self.delivered, self.duplicates = delivered, duplicates

    def is_set(self) -> bool:
        stats = self.receiver.stats
        return (stats.completed - self.before.completed >= self.delivered
                and stats.duplicates_suppressed - self.before.duplicates_suppressed
                >= self.duplicates)


class SyncGateway(Runner):
    """The sync ``GeoReceiver``, blocking: ``receive`` + ``complete`` each, or ``run``
    with a plain handler. Made (untimed) before each drain; it opens its own transports
    on its own loop thread."""

    def __init__(self, batch: int, *, use_run: bool, copies: int = 1) -> None:
        super().__init__(batch)
        self.use_run, self.copies = use_run, copies

    async def drain(self, n: int) -> float:
        receiver = GeoReceiver(
            primary="local://primary", secondary="local://secondary", entity=ENTITY,
            data_dir=self.root, dedup_store=self.root / "dedup.db", poll_wait=0.05,
        )
        until = _Until(receiver, receiver.stats, n, n * (self.copies - 1))
        started = time.perf_counter()
        if self.use_run:
            receiver.run(_nothing, max_messages=self.batch, stop=until)
        else:
            while not until.is_set():
                for received in receiver.receive(self.batch, max_wait=0.05):
                    receiver.complete(received)
        elapsed = time.perf_counter() - started
        stats = receiver.stats
        receiver.close()
        assert stats.delivered == n, "a message went missing"
        assert stats.completed == n, "a message was not completed"
        return elapsed


@dataclass(frozen=True)
class Variant:
    name: str
    runner: Callable[[int], Runner]
    reference: str | None
    judged: bool = True
    grouped: str | None = None  # the grouped raw loop beside the reference (context)


RAW1 = "raw 1: receive + complete, 1 namespace"
RAW2 = "raw 2: receive + complete, 2 namespaces"
GROUPED1 = "raw 1g: receive + complete_many, 1 namespace"
GROUPED2 = "raw 2g: receive + complete_many, 2 namespaces"
VARIANTS = [
    Variant(RAW1, Raw, None),
    Variant(GROUPED1, Grouped, RAW1, judged=False),
    Variant("gateway receive() + complete(), 1 copy",
            lambda b: Gateway(b, use_run=False), RAW1, grouped=GROUPED1),
    Variant("gateway run(async handler), 1 copy", lambda b: Gateway(b, use_run=True), RAW1,
            grouped=GROUPED1),
    Variant("gateway run(sync handler), 1 copy",
            lambda b: Gateway(b, use_run=True, plain=True), RAW1, grouped=GROUPED1),
    Variant("sync GeoReceiver.receive() + complete(), 1 copy",
            lambda b: SyncGateway(b, use_run=False), RAW1, grouped=GROUPED1),
    Variant("sync GeoReceiver.run(handler), 1 copy",
            lambda b: SyncGateway(b, use_run=True), RAW1, grouped=GROUPED1),
    Variant(RAW2, RawTwo, None),
    Variant(GROUPED2, GroupedTwo, RAW2, judged=False),
    Variant("gateway receive() + complete(), 2 copies",
            lambda b: Gateway(b, use_run=False, copies=2), RAW2, grouped=GROUPED2),
    Variant("gateway run(async handler), 2 copies",
            lambda b: Gateway(b, use_run=True, copies=2), RAW2, grouped=GROUPED2),
    Variant("gateway run(sync handler), 2 copies",
            lambda b: Gateway(b, use_run=True, copies=2, plain=True), RAW2,
            grouped=GROUPED2),
    Variant("sync GeoReceiver.receive() + complete(), 2 copies",
            lambda b: SyncGateway(b, use_run=False, copies=2), RAW2, grouped=GROUPED2),
    Variant("sync GeoReceiver.run(handler), 2 copies",
            lambda b: SyncGateway(b, use_run=True, copies=2), RAW2, grouped=GROUPED2),
]


async def measure(variants: list[Variant], root: Path, rounds: int, cycles: int, n: int,
                  batch: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds per variant per round (the sum of its ``cycles`` drains), and the
    process's CPU seconds during them (every thread's)."""
    runners = {v.name: v.runner(batch) for v in variants}
    for i, runner in enumerate(runners.values()):
        await runner.setup(root / f"v{i}")
    seconds: dict[str, list[float]] = {v.name: [] for v in variants}
    cpu: dict[str, list[float]] = {v.name: [] for v in variants}
    names = list(runners)
    body = os.urandom(BODY)
    try:
        for r in range(rounds):
            spent = dict.fromkeys(names, 0.0)
            used = dict.fromkeys(names, 0.0)
            for c in range(cycles):
                messages = [Message(body, message_id=f"r{r}-c{c}-{i:06d}") for i in range(n)]
                for runner in runners.values():
                    await runner.fill(messages)
                shift = (r * cycles + c) % len(names)
                for name in names[shift:] + names[:shift]:
                    began = time.process_time()
                    spent[name] += await runners[name].drain(n)
                    used[name] += time.process_time() - began
            for name in names:
                seconds[name].append(spent[name])
                cpu[name].append(used[name])
    finally:
        for runner in runners.values():
            await runner.close()
    return seconds, cpu


def render(variants: list[Variant], seconds: dict[str, list[float]],
           cpu: dict[str, list[float]], n: int, rounds: int, batch: int) -> Table:
    table = Table(title=f"Receive path on local namespaces: {n:,} messages of {BODY} B per "
                  f"variant per round, receives of up to {batch}, median of {rounds} rounds")
    for column, justify in (("variant", "left"), ("msgs/s", "right"),
                            ("time vs reference [per round]", "right"),
                            ("CPU vs reference", "right"),
                            ("time vs grouped raw", "right"),
                            ("target", "right"), ("", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for v in variants:
        times = seconds[v.name]
        rate = statistics.median(n / t for t in times)
        if v.reference is None:
            table.add_row(escape(v.name), f"{rate:,.0f}", "", "", "", "", "", style="bold")
            continue
        ratios = [t / ref for t, ref in zip(times, seconds[v.reference], strict=True)]
        ratio = statistics.median(ratios)
        spread = ", ".join(f"{x:.2f}" for x in ratios)
        cpu_ratio = statistics.median(
            c / ref for c, ref in zip(cpu[v.name], cpu[v.reference], strict=True))
        grouped = ""
        if v.grouped is not None and v.grouped in seconds:
            against = zip(times, seconds[v.grouped], strict=True)
            grouped = f"{statistics.median(t / g for t, g in against):.2f}x"
        ok = ("PASS" if ratio <= TARGET else "FAIL") if v.judged else ""
        table.add_row(
            escape(v.name), f"{rate:,.0f}", escape(f"{ratio:.2f}x [{spread}]"),
            f"{cpu_ratio:.2f}x", grouped, f"<= {TARGET}x" if v.judged else "(context)", ok,
            style="green" if ok == "PASS" else "red" if ok == "FAIL" else None,
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians over these)")
    parser.add_argument("--cycles", type=int, default=4,
                        help="fill-and-drain cycles per round")
    parser.add_argument("--messages", type=int, default=500,
                        help="messages per variant per cycle")
    parser.add_argument("--batch", type=int, default=100,
                        help="max_messages of each receive (raw and gateway)")
    parser.add_argument("--only", default="",
                        help="run only the variants whose name has this text (and their "
                             "references), e.g. 'sync' or '1 copy'")
    args = parser.parse_args()
    chosen = [v for v in VARIANTS if args.only in v.name]
    wanted = {v.reference for v in chosen} | {v.grouped for v in chosen}
    variants = [v for v in VARIANTS if v in chosen or v.name in wanted]
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
        seconds, cpu = asyncio.run(measure(variants, Path(tmp), args.rounds, args.cycles,
                                           args.messages, args.batch))
    per_round = args.cycles * args.messages
    Console(width=160).print(render(variants, seconds, cpu, per_round, args.rounds,
                                    args.batch))
    print("msgs/s counts ids delivered; the two-copy raw loop completes twice as many.")
    print("CPU: the process's CPU time (every thread) during the drains, median ratio of "
          "the rounds (context: less sensitive to other jobs than the time).")


if __name__ == "__main__":
    main()
