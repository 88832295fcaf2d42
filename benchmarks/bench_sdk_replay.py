"""Benchmark replay over the Service Bus transport against the raw SDK sender.

    .venv/bin/python benchmarks/bench_sdk_replay.py [--rounds 5] [--messages 1000 10000]

Starts ``geogateway emulator`` (a child process; namespaces ``primary`` and
``secondary`` with the queue ``bench``) and, in the same run and event loop, sends
the same N messages of 1 KiB to ``primary`` through:

* raw SDK, new sender: a new azure-servicebus ``ServiceBusClient`` and
  ``ServiceBusSender`` (the SDK's defaults), opened, then ``send_messages`` of
  ``ServiceBusMessageBatch`` es packed as full as the link allows; timed from
  creating the client to the last batch sent (closing it is not timed). This is
  the reference: what a program that pushes N messages to a namespace that just
  came back pays;
* raw SDK, sender open: the same on a sender opened before timing (the send
  alone, for context);
* replay after an outage: an ``AsyncGeoSender`` (active mode, ``recovery=False``,
  links open) whose primary was taken down (``LocalNamespace.down()``, applied by
  the emulator) while it sent the N messages, so that they are in its durable
  queue; once the primary is back up, ``await sender.replay()`` is timed (probe of
  the namespace, then the drain);
* replay by a new sender, as ``geogateway queue replay`` does: a durable queue
  holding the N messages for ``primary``; timed from creating the
  ``AsyncGeoSender`` to the end of ``replay()`` (closing it is not timed).

Each round runs every variant once per message count, in a rotated order; the
table shows the median seconds and messages/s over the rounds and the median of
the per-round speed ratio (reference time / variant time; 1.0x = as fast).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import MessageSizeExceededError
from rich.console import Console
from rich.table import Table

from durable_queue import DurableQueue
from gateway.emulator._process import EmulatorProcess
from gateway.geo._config import NamespaceConfig
from gateway.geo.sender._sender import AsyncGeoSender
from gateway.transports.local import LocalNamespace
from replication import Message
from replication._routing import destination

QUEUE, PRIMARY, SECONDARY = "bench", "primary", "secondary"
BODY = 1024
TARGET = 0.8  # replay at >= 0.8x the raw SDK sender
APPLIES = 0.25  # the emulator applies a control-file change within this (drill.py)
REFERENCE = "raw SDK, new sender"

_ids = itertools.count()


@dataclass
class Row:
    name: str
    seconds: dict[int, list[float]] = field(default_factory=dict)  # messages -> per round


def fresh_messages(n: int) -> list[Message]:
    tag = next(_ids)
    return [Message(os.urandom(BODY // 2).hex().encode(), message_id=f"r{tag}-{i}")
            for i in range(n)]


async def send_packed(sender: ServiceBusSender, messages: list[Message]) -> None:
    batch = await sender.create_message_batch()
    for m in messages:
        out = ServiceBusMessage(m.body, message_id=m.message_id)
        try:
            batch.add_message(out)
        except MessageSizeExceededError:
            await sender.send_messages(batch)
            batch = await sender.create_message_batch()
            batch.add_message(out)
    await sender.send_messages(batch)


class Bench:
    def __init__(self, emu: EmulatorProcess, root: Path) -> None:
        self.emu, self.root = emu, root
        self.data = root / "namespaces"
        self.runs = itertools.count()

    def config(self, name: str) -> NamespaceConfig:
        return NamespaceConfig(connection_string=self.emu.connection_string(name), name=name,
                               kind="servicebus")

    def sender(self, run: int, *, mode: str = "passive",
               queue: DurableQueue | None = None) -> AsyncGeoSender:
        return AsyncGeoSender(primary=self.config(PRIMARY), secondary=self.config(SECONDARY),
                              entity=QUEUE, data_dir=self.data, recovery=False, mode=mode,
                              durable_queue=queue or self.root / f"buffer-{run}.db",
                              state_dir=self.root / f"state-{run}")

    async def raw_new(self, messages: list[Message]) -> float:
        started = time.perf_counter()
        client = ServiceBusClient.from_connection_string(self.emu.connection_string(PRIMARY))
        sender = client.get_queue_sender(QUEUE)
        try:
            await sender.__aenter__()
            await send_packed(sender, messages)
            return time.perf_counter() - started
        finally:
            await sender.close()
            await client.close()

    async def raw_open(self, messages: list[Message]) -> float:
        client = ServiceBusClient.from_connection_string(self.emu.connection_string(PRIMARY))
        sender = client.get_queue_sender(QUEUE)
        try:
            await sender.__aenter__()
            started = time.perf_counter()
            await send_packed(sender, messages)
            return time.perf_counter() - started
        finally:
            await sender.close()
            await client.close()

    async def after_outage(self, messages: list[Message]) -> float:
        sender = self.sender(next(self.runs), mode="active")
        async with sender:
            await sender.send_batch(fresh_messages(1))  # links open on both namespaces
            with LocalNamespace(PRIMARY, data_dir=self.data) as ns:
                ns.down()
                await asyncio.sleep(APPLIES)
                result = await sender.send_batch(messages)
                assert result.buffered, "the primary's copies were not buffered"
                ns.up()
            await asyncio.sleep(APPLIES)
            started = time.perf_counter()
            replayed = await sender.replay()
            elapsed = time.perf_counter() - started
        assert replayed == len(messages), (replayed, len(messages))
        return elapsed

    async def new_sender(self, messages: list[Message]) -> float:
        run = next(self.runs)
        queue = DurableQueue(self.root / f"buffer-{run}.db")
        try:
            queue.put_many(destination(PRIMARY, QUEUE), messages)
            started = time.perf_counter()
            sender = self.sender(run, queue=queue)
            try:
                await sender.start()
                replayed = await sender.replay()
                elapsed = time.perf_counter() - started
            finally:
                await sender.aclose()
        finally:
            queue.close()
        assert replayed == len(messages), (replayed, len(messages))
        return elapsed


async def measure(rounds: int, counts: list[int]) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-replay-") as tmp:
        root = Path(tmp)
        async with EmulatorProcess((PRIMARY, SECONDARY), data_dir=root / "namespaces",
                                   queues=(QUEUE,), log=root / "emulator.log") as emu:
            bench = Bench(emu, root)
            variants: list[tuple[Row, Callable[[list[Message]], Awaitable[float]]]] = [
                (Row(REFERENCE), bench.raw_new), (Row("raw SDK, sender open"), bench.raw_open),
                (Row("replay after an outage (sender.replay())"), bench.after_outage),
                (Row("replay by a new sender (queue replay)"), bench.new_sender)]
            await bench.raw_new(fresh_messages(10))  # warm up the emulator and imports
            for r in range(rounds):
                for n in counts:
                    shift = r % len(variants)
                    for row, run in variants[shift:] + variants[:shift]:
                        row.seconds.setdefault(n, []).append(await run(fresh_messages(n)))
    return [row for row, _ in variants]


def table(rows: list[Row], rounds: int, counts: list[int]) -> Table:
    t = Table(title=f"replay over the Service Bus transport vs the raw SDK sender, against the "
                    f"emulator, {BODY} B messages, median of {rounds} rounds")
    for col in ("messages", "variant", "seconds", "messages/s", "speed vs raw new sender",
                "target", ""):
        t.add_column(col)
    reference = next(r for r in rows if r.name == REFERENCE)
    for n in counts:
        for row in rows:
            seconds = statistics.median(row.seconds[n])
            rate = f"{n / seconds:,.0f}"
            if row is reference:
                t.add_row(f"{n:,}", row.name, f"{seconds:.3f}", rate, "(reference)", "", "")
                continue
            ratio = statistics.median(
                ref / s for ref, s in zip(reference.seconds[n], row.seconds[n], strict=True))
            gated = row.name.startswith("replay")
            verdict = ("PASS" if ratio >= TARGET else "FAIL") if gated else ""
            t.add_row("", row.name, f"{seconds:.3f}", rate, f"{ratio:.2f}x",
                      f">= {TARGET}x" if gated else "", verdict)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    began = time.perf_counter()
    rows = asyncio.run(measure(args.rounds, args.messages))
    console = Console(width=160)
    console.print(table(rows, args.rounds, args.messages))
    console.print(f"wall time {time.perf_counter() - began:.0f} s; cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
