"""Benchmark what metrics and tracing cost on the send path and on the receiver's run().

    .venv/bin/python benchmarks/bench_observability.py [--rounds 5] [--cycles 6]
        [--chunk 10] [--single-chunk 50] [--messages 500]

Every variant is the same gateway on local namespaces of its own (one temporary
directory), with different hooks:

- none: no hooks (the reference of its table);
- metrics: ``PrometheusMetrics`` (a registry of its own);
- tracing, API only: ``Tracing()`` on the global provider, which is the API's no-op
  one (an application with ``opentelemetry-api`` but no SDK);
- tracing, SDK: ``Tracing`` on an SDK ``TracerProvider`` that records every span
  (always-on sampling) through a ``BatchSpanProcessor`` into an exporter that only
  counts them (a real exporter adds its own serialisation and I/O, in its thread);
- metrics + tracing, SDK: both (judged: target <= 5% over none);
- metrics + tracing, SDK sampling 10%: ``ParentBased(TraceIdRatioBased(0.1))``
  (context: what a production sampler costs).

Send path: ``AsyncGeoSender.send_batch`` of 100 messages of 1 KiB (passive), and
``send(message)`` one at a time, timed as in bench_send_path.py: a round is
``--cycles`` rotations through all variants, each sending ``--chunk`` batches (or
``--single-chunk`` messages) in turn, the order rotated each time.

Receive path: ``AsyncGeoReceiver.run(handler)`` draining ``--messages`` messages (one
copy, as after passive sends; the messages carry a trace context, as a traced sender
leaves them), timed as in bench_receive.py: every variant's queue is filled (untimed),
then each drains its own, the order rotated each cycle; a receiver is opened just
before its timed drain and closed after it.

The tables show the median rate over ``--rounds`` rounds and the median of the
per-round overheads (variant time / the none variant's time in the same round - 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.geo import AsyncGeoReceiver, AsyncGeoSender, GatewayHooks
from gateway.observability import PrometheusMetrics, Tracing
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.base import ReceivedMessage
from replication import Message

ENTITY = "bench"
BATCH = 100
BODY = 1024
TARGET = 0.05  # the issue: metrics and tracing enabled cost at most 5%
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class CountingExporter(SpanExporter):
    """Takes every span the batch processor hands over and only counts them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def sdk_tracing(ratio: float | None = None) -> tuple[Tracing, TracerProvider]:
    sampler = None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(CountingExporter()))
    return Tracing(tracer_provider=provider), provider


@dataclass(frozen=True)
class Hooks:
    """One variant's hooks."""

    name: str
    make: Callable[[], tuple[list[GatewayHooks], TracerProvider | None]]


def _metrics() -> PrometheusMetrics:
    return PrometheusMetrics(registry=CollectorRegistry())


def _sdk(ratio: float | None = None, *, metrics: bool = False
         ) -> tuple[list[GatewayHooks], TracerProvider | None]:
    tracing, provider = sdk_tracing(ratio)
    return ([_metrics(), tracing] if metrics else [tracing]), provider


NONE = "none"
BOTH = "metrics + tracing, SDK"
VARIANTS = [
    Hooks(NONE, lambda: ([], None)),
    Hooks("metrics", lambda: ([_metrics()], None)),
    Hooks("tracing, API only (no SDK)", lambda: ([Tracing()], None)),
    Hooks("tracing, SDK (every span)", lambda: _sdk()),
    Hooks(BOTH, lambda: _sdk(metrics=True)),
    Hooks("metrics + tracing, SDK sampling 10%", lambda: _sdk(0.1, metrics=True)),
]
JUDGED = {"metrics", BOTH}


def make_namespaces(root: Path) -> None:
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=root) as namespace:
            namespace.create_queue(ENTITY)


class Sending:
    """A passive sender with one variant's hooks."""

    def __init__(self, hooks: Hooks, *, single: bool) -> None:
        self.hooks, self.single = hooks, single

    async def setup(self, root: Path, batch: list[Message]) -> None:
        make_namespaces(root)
        hooks, self.provider = self.hooks.make()
        self.sender = AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                                     entity=ENTITY, data_dir=root, state_dir=root / "state",
                                     hooks=hooks)
        await self.sender.start()
        await self.sender.send_batch(batch)

    async def chunk(self, batch: list[Message], n: int) -> float:
        started = time.perf_counter()
        if self.single:
            send, first = self.sender.send, batch[0]
            for _ in range(n):
                await send(first)
        else:
            send_batch = self.sender.send_batch
            for _ in range(n):
                await send_batch(batch)
        return time.perf_counter() - started

    async def close(self) -> None:
        assert not self.sender.down and not self.sender.backlog, "a namespace failed"
        await self.sender.aclose()
        if self.provider is not None:
            self.provider.shutdown()


async def measure_sends(root: Path, batch: list[Message], rounds: int, cycles: int,
                        chunk: int, *, single: bool) -> dict[str, list[float]]:
    runners = {v.name: Sending(v, single=single) for v in VARIANTS}
    for i, runner in enumerate(runners.values()):
        await runner.setup(root / f"v{i}", batch)
    names = list(runners)
    seconds: dict[str, list[float]] = {n: [] for n in names}
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


class Receiving:
    """A receiver's run() with one variant's hooks, on namespaces of its own."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks

    async def setup(self, root: Path) -> None:
        self.root = root
        make_namespaces(root)
        self.transports = [LocalTransport(n, data_dir=root) for n in ("primary", "secondary")]
        for t in self.transports:  # warm-up: opens the file, starts the worker
            await t.receive(ENTITY, max_messages=1)
        self.hook_list, self.provider = self.hooks.make()

    async def fill(self, messages: list[Message]) -> None:
        for i in range(0, len(messages), 100):
            await self.transports[0].send(ENTITY, messages[i:i + 100])

    async def drain(self, n: int) -> float:
        receiver = AsyncGeoReceiver(
            primary=self.transports[0], secondary=self.transports[1], entity=ENTITY,
            dedup_store=self.root / "dedup.db", poll_wait=0.05, hooks=self.hook_list)
        before = receiver.stats.completed

        class Until:
            def is_set(self) -> bool:
                return receiver.stats.completed - before >= n

        started = time.perf_counter()
        await receiver.run(_noop, max_messages=100, stop=Until())
        elapsed = time.perf_counter() - started
        await receiver.aclose()
        return elapsed

    async def close(self) -> None:
        for t in self.transports:
            await t.aclose()
        if self.provider is not None:
            self.provider.shutdown()


async def _noop(message: ReceivedMessage) -> None:
    return None


async def measure_receives(root: Path, rounds: int, cycles: int, n: int
                           ) -> dict[str, list[float]]:
    runners = {v.name: Receiving(v) for v in VARIANTS}
    for i, runner in enumerate(runners.values()):
        await runner.setup(root / f"r{i}")
    names = list(runners)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    body = os.urandom(BODY)
    try:
        for r in range(rounds):
            spent = dict.fromkeys(names, 0.0)
            for c in range(cycles):
                messages = [Message(body, message_id=f"r{r}-c{c}-{i:06d}",
                                    properties={"traceparent": TRACEPARENT,
                                                "Diagnostic-Id": TRACEPARENT})
                            for i in range(n)]
                for runner in runners.values():
                    await runner.fill(messages)
                shift = (r * cycles + c) % len(names)
                for name in names[shift:] + names[:shift]:
                    spent[name] += await runners[name].drain(n)
            for name in names:
                seconds[name].append(spent[name])
    finally:
        for runner in runners.values():
            await runner.close()
    return seconds


def render(title: str, seconds: dict[str, list[float]], per_round: int, unit: str) -> Table:
    table = Table(title=title)
    for column, justify in ((("variant", "left"), (unit, "right"),
                             ("overhead vs none [per round]", "right"),
                             ("target", "right"), ("", "left"))):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    reference = seconds[NONE]
    for name, times in seconds.items():
        rate = statistics.median(per_round / t for t in times)
        if name == NONE:
            table.add_row(escape(name), f"{rate:,.0f}", "", "", "", style="bold")
            continue
        overheads = [t / ref - 1 for t, ref in zip(times, reference, strict=True)]
        overhead = statistics.median(overheads)
        spread = ", ".join(f"{x:+.1%}" for x in overheads)
        judged = name in JUDGED
        ok = ("PASS" if overhead <= TARGET else "FAIL") if judged else ""
        table.add_row(escape(name), f"{rate:,.0f}", escape(f"{overhead:+.1%} [{spread}]"),
                      f"<= {TARGET:.0%}" if judged else "(context)", ok,
                      style="green" if ok == "PASS" else "red" if ok == "FAIL" else None)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians over these)")
    parser.add_argument("--cycles", type=int, default=6,
                        help="rotations through all variants per round")
    parser.add_argument("--chunk", type=int, default=10, help="batches per variant per turn")
    parser.add_argument("--single-chunk", type=int, default=50,
                        help="single sends per variant per turn")
    parser.add_argument("--messages", type=int, default=500,
                        help="messages each receiver drains per cycle")
    args = parser.parse_args()
    console = Console(width=130)
    batch = [Message(os.urandom(BODY), message_id=f"bench-{i:05d}") for i in range(BATCH)]
    results: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
        root = Path(tmp)
        seconds = asyncio.run(measure_sends(root / "batches", batch, args.rounds, args.cycles,
                                            args.chunk, single=False))
        results.append(render(
            f"Send path: AsyncGeoSender.send_batch({BATCH} x {BODY} B), passive, local "
            f"namespaces; median of {args.rounds} rounds",
            seconds, args.cycles * args.chunk * BATCH, "msgs/s"))
        seconds = asyncio.run(measure_sends(root / "single", batch, args.rounds, args.cycles,
                                            args.single_chunk, single=True))
        results.append(render(
            f"Send path: AsyncGeoSender.send(one {BODY} B message), passive; median of "
            f"{args.rounds} rounds", seconds, args.cycles * args.single_chunk, "msgs/s"))
        seconds = asyncio.run(measure_receives(root / "receive", args.rounds, args.cycles,
                                               args.messages))
        results.append(render(
            f"Receive path: AsyncGeoReceiver.run(async no-op handler), {args.messages} "
            f"messages per drain, one copy; median of {args.rounds} rounds",
            seconds, args.cycles * args.messages, "msgs/s"))
    for table in results:
        console.print(table)


if __name__ == "__main__":
    main()
