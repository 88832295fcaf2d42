"""Benchmark what metrics and tracing cost on the send path and on the receiver's run().

    .venv/bin/python benchmarks/bench_observability.py [--pairs 30] [--chunk 10]
        [--single-chunk 100] [--messages 300] [--transport local|servicebus]

Every variant is the same gateway with different hooks, on namespaces (local) or
queues (Service Bus) of its own:

- none: no hooks (the reference);
- metrics: ``PrometheusMetrics`` (a registry of its own);
- tracing, API only: ``Tracing()`` on the global provider, which is the API's no-op
  one (an application with ``opentelemetry-api`` but no SDK);
- metrics + tracing, API only: both (judged, with metrics alone: target <= 5%);
- tracing, SDK: ``Tracing`` on an SDK ``TracerProvider`` that records every span
  (always-on sampling) through a ``BatchSpanProcessor`` into an exporter that only
  counts them (a real exporter adds its own serialisation and I/O, in its thread);
- metrics + tracing, SDK: both, every span recorded;
- metrics + tracing, SDK sampling 10%: ``ParentBased(TraceIdRatioBased(0.1))``.

Send path: ``AsyncGeoSender.send_batch`` of 100 messages of 1 KiB (passive), ``--chunk``
batches per timed run; and ``send(message)`` one at a time, ``--single-chunk`` per run.
Receive path: ``AsyncGeoReceiver.run(handler)`` draining ``--messages`` messages (one
copy, as after passive sends; they carry a trace context, as a traced sender leaves
them), put in its queue untimed just before; the receiver is opened on warm transports
before the timed drain and closed after it.

The machines these run on are shared, and their load moves a run's time by tens of
percent within seconds. So each variant runs ``--pairs`` times right beside the none
variant (in alternating order, the variants in rotating order), and the overhead is
the median, over its pairs, of its time over the none variant's in the same pair, with
the quartiles beside it. Each run is timed twice: wall-clock, and the CPU time of this
process (``time.process_time``: every thread's, the SDK's span export thread and the
worker threads included).

Beside them, "inside the hooks": the time spent in the variant's hook calls and
tracer calls (each wrapped in a timer; the handler and the send inside a span are not
counted), over the none variant's wall-clock time in the same pair: the hooks' own
cost, which the load moves much less. The target is judged on it: on these machines
the end-to-end medians cannot tell 5% from 0 (their quartiles are tens of percent
apart). It leaves out what the hooks make others do, such as a transport encoding the
trace context each message carries, and the SDK's export thread: the CPU column has
those. "their CPU" (context) is the same calls' CPU time of the thread making them
(``time.thread_time``): what the wall-clock time inside them holds beyond it is time
the thread waited (for the GIL, held by another thread, or descheduled by the machine).
``--only batches|single|receive`` runs one of the three tables.

``--transport servicebus`` runs the same over the Azure Service Bus SDK transport
against ``geogateway emulator`` (a child process; its CPU is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gateway.emulator import EmulatorProcess
from gateway.geo import (
    AsyncGeoReceiver,
    AsyncGeoSender,
    GatewayHooks,
    MessageTracer,
    NamespaceConfig,
    NamespaceLike,
    SendTrace,
)
from gateway.geo._factory import open_transport
from gateway.observability import PrometheusMetrics, Tracing
from gateway.transports import LocalNamespace
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
BOTH_API = "metrics + tracing, API only"
BOTH_SDK = "metrics + tracing, SDK (every span)"
VARIANTS = [
    Hooks(NONE, lambda: ([], None)),
    Hooks("metrics", lambda: ([_metrics()], None)),
    Hooks("tracing, API only (no SDK)", lambda: ([Tracing()], None)),
    Hooks(BOTH_API, lambda: ([_metrics(), Tracing()], None)),
    Hooks("tracing, SDK (every span)", lambda: _sdk()),
    Hooks(BOTH_SDK, lambda: _sdk(metrics=True)),
    Hooks("metrics + tracing, SDK sampling 10%", lambda: _sdk(0.1, metrics=True)),
]
JUDGED = {"metrics", BOTH_API, BOTH_SDK}


@dataclass
class Place:
    """Where the variants' namespaces are: local ones under ``root``, or the emulator's
    (``emulator`` set), each variant with a queue of its own (``queue(i)``)."""

    root: Path
    emulator: EmulatorProcess | None = None

    @staticmethod
    def queue(index: int) -> str:
        return f"{ENTITY}-{index}"

    def namespaces(self, index: int) -> tuple[NamespaceLike, NamespaceLike]:
        if self.emulator is None:
            root = self.root / f"v{index}"
            make_namespaces(root, self.queue(index))
            return "local://primary", "local://secondary"
        emu = self.emulator
        first, second = (NamespaceConfig(connection_string=emu.connection_string(n), name=n,
                                         kind="servicebus") for n in ("primary", "secondary"))
        return first, second

    def data_dir(self, index: int) -> Path:
        return self.root / f"v{index}"


class Timer:
    """Wall-clock and CPU time of what runs inside it, added to ``wall`` / ``cpu``."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Timer:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu


class Meter:
    """Seconds spent inside the hooks (and the tracer's calls) of one variant."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0  # the same calls' CPU time of the thread making them

    def reset(self) -> None:
        self.seconds = self.cpu = 0.0

    def timed(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        began, began_cpu = time.perf_counter(), time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - began
            self.cpu += time.thread_time() - began_cpu


_HOOK_NAMES = [n for n in vars(GatewayHooks) if n.startswith("on_")]


class MeteredHooks(GatewayHooks):
    """A hook whose every call is timed into a meter (the core sees it as the hook)."""

    def __init__(self, inner: GatewayHooks, meter: Meter) -> None:
        self.inner, self.meter = inner, meter


for _name in _HOOK_NAMES:
    def _forward(self: MeteredHooks, _n: str = _name, **kwargs: Any) -> None:
        self.meter.timed(getattr(self.inner, _n), **kwargs)
    setattr(MeteredHooks, _name, _forward)


class _MeteredScope:
    """A context manager (and a send's trace) whose enter, exit and ``finished`` are
    timed, not the block inside it (the send, or the handler)."""

    def __init__(self, inner: Any, meter: Meter) -> None:
        self.inner, self.meter = inner, meter

    @property
    def messages(self) -> Sequence[Message]:
        return self.inner.messages  # type: ignore[no-any-return]

    def __enter__(self) -> _MeteredScope:
        self.meter.timed(self.inner.__enter__)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.meter.timed(self.inner.__exit__, *exc)

    def finished(self, **kwargs: Any) -> None:
        self.meter.timed(self.inner.finished, **kwargs)


class MeteredTracing(MeteredHooks, MessageTracer):
    """The same for a tracing hook: the seam's calls are timed too."""

    def send(self, **kwargs: Any) -> SendTrace:
        scope = self.meter.timed(self.inner.send, **kwargs)
        return _MeteredScope(scope, self.meter)  # type: ignore[return-value]

    def process(self, **kwargs: Any) -> Any:
        return _MeteredScope(self.meter.timed(self.inner.process, **kwargs), self.meter)

    def received(self, **kwargs: Any) -> None:
        self.meter.timed(self.inner.received, **kwargs)

    def settled(self, **kwargs: Any) -> None:
        self.meter.timed(self.inner.settled, **kwargs)

    def skipped(self, **kwargs: Any) -> None:
        self.meter.timed(self.inner.skipped, **kwargs)


def metered(hooks: list[GatewayHooks], meter: Meter) -> list[GatewayHooks]:
    return [MeteredTracing(h, meter) if isinstance(h, MessageTracer) else MeteredHooks(h, meter)
            for h in hooks]


def make_namespaces(root: Path, queue: str) -> None:
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=root) as namespace:
            namespace.create_queue(queue)


class Sending:
    """A passive sender with one variant's hooks."""

    def __init__(self, hooks: Hooks, *, single: bool) -> None:
        self.hooks, self.single = hooks, single

    async def setup(self, place: Place, index: int, batch: list[Message]) -> None:
        primary, secondary = place.namespaces(index)
        hooks, self.provider = self.hooks.make()
        self.meter = Meter()
        hooks = metered(hooks, self.meter)
        self.sender = AsyncGeoSender(primary=primary, secondary=secondary,
                                     entity=place.queue(index), data_dir=place.data_dir(index),
                                     state_dir=place.data_dir(index) / "state", hooks=hooks)
        await self.sender.start()
        await self.sender.send_batch(batch)

    async def chunk(self, batch: list[Message], n: int, timer: Timer) -> None:
        with timer:
            if self.single:
                send, first = self.sender.send, batch[0]
                for _ in range(n):
                    await send(first)
            else:
                send_batch = self.sender.send_batch
                for _ in range(n):
                    await send_batch(batch)

    async def close(self) -> None:
        assert not self.sender.down and not self.sender.backlog, "a namespace failed"
        await self.sender.aclose()
        if self.provider is not None:
            self.provider.shutdown()


@dataclass
class Pairs:
    """What one variant measured: its own times, and its time over the none variant's
    in the pair it ran in (wall-clock, CPU)."""

    times: list[tuple[float, float]] = field(default_factory=list)
    ratios: list[tuple[float, float]] = field(default_factory=list)
    #: Per run: seconds inside its hooks over the pair's none variant's wall-clock time.
    in_hooks: list[float] = field(default_factory=list)
    #: The same with the hooks' CPU time (of the thread calling them) instead.
    in_hooks_cpu: list[float] = field(default_factory=list)


Results = dict[str, Pairs]


async def paired(names: list[str], rounds: int,
                 run: Callable[[str], Awaitable[tuple[float, float, float, float]]]
                 ) -> Results:
    """Run each variant right beside the none variant, ``rounds`` times, and keep the
    ratio of each pair: the two ran under the same load of the machine."""
    results: Results = {name: Pairs() for name in names}
    others = [n for n in names if n != NONE]
    for r in range(rounds):
        shift = r % len(others)
        for name in others[shift:] + others[:shift]:
            first, second = (NONE, name) if r % 2 == 0 else (name, NONE)
            times = {first: await run(first)}
            times[second] = await run(second)
            (wall, cpu, hooks, hooks_cpu), (ref_wall, ref_cpu, _, _) = (times[name],
                                                                         times[NONE])
            results[name].times.append((wall, cpu))
            results[NONE].times.append((ref_wall, ref_cpu))
            results[name].ratios.append((wall / ref_wall, cpu / ref_cpu))
            results[name].in_hooks.append(hooks / ref_wall)
            results[name].in_hooks_cpu.append(hooks_cpu / ref_wall)
    return results


async def measure_sends(place: Place, batch: list[Message], pairs: int, chunk: int, *,
                        single: bool) -> Results:
    runners = {v.name: Sending(v, single=single) for v in VARIANTS}
    for i, runner in enumerate(runners.values()):
        await runner.setup(place, i, batch)

    async def run(name: str) -> tuple[float, float, float, float]:
        timer, meter = Timer(), runners[name].meter
        meter.reset()
        await runners[name].chunk(batch, chunk, timer)
        return timer.wall, timer.cpu, meter.seconds, meter.cpu

    try:
        return await paired(list(runners), pairs, run)
    finally:
        for runner in runners.values():
            await runner.close()


class Receiving:
    """A receiver's run() with one variant's hooks, on a queue of its own."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks

    async def setup(self, place: Place, index: int) -> None:
        self.root, self.entity = place.data_dir(index), place.queue(index)
        self.root.mkdir(parents=True, exist_ok=True)
        self.transports = [open_transport(ns, data_dir=self.root)[0]
                           for ns in place.namespaces(index)]
        for t in self.transports:  # warm-up: opens the file, or the connection and link
            await t.receive(self.entity, max_messages=1)
        hooks, self.provider = self.hooks.make()
        self.meter = Meter()
        self.hook_list = metered(hooks, self.meter)

    async def fill(self, messages: list[Message]) -> None:
        for i in range(0, len(messages), 100):
            await self.transports[0].send(self.entity, messages[i:i + 100])

    async def drain(self, n: int, timer: Timer) -> None:
        receiver = AsyncGeoReceiver(
            primary=self.transports[0], secondary=self.transports[1], entity=self.entity,
            dedup_store=self.root / "dedup.db", poll_wait=0.05, hooks=self.hook_list)
        before = receiver.stats.completed

        class Until:
            def is_set(self) -> bool:
                return receiver.stats.completed - before >= n

        with timer:
            await receiver.run(_noop, max_messages=100, stop=Until())
        await receiver.aclose()

    async def close(self) -> None:
        for t in self.transports:
            await t.aclose()
        if self.provider is not None:
            self.provider.shutdown()


async def _noop(message: ReceivedMessage) -> None:
    return None


async def measure_receives(place: Place, pairs: int, n: int) -> Results:
    runners = {v.name: Receiving(v) for v in VARIANTS}
    for i, runner in enumerate(runners.values()):
        await runner.setup(place, i)
    body = os.urandom(BODY)
    drained = [0]

    async def run(name: str) -> tuple[float, float, float, float]:
        drained[0] += 1
        # Fresh ids each drain (nothing is a duplicate of an earlier one), with the
        # trace context a traced sender gives them; put there untimed.
        await runners[name].fill([
            Message(body, message_id=f"d{drained[0]}-{i:06d}",
                    properties={"traceparent": TRACEPARENT, "Diagnostic-Id": TRACEPARENT})
            for i in range(n)])
        timer, meter = Timer(), runners[name].meter
        meter.reset()
        await runners[name].drain(n, timer)
        return timer.wall, timer.cpu, meter.seconds, meter.cpu

    try:
        return await paired(list(runners), pairs, run)
    finally:
        for runner in runners.values():
            await runner.close()


def render(title: str, results: Results, per_run: int) -> Table:
    table = Table(title=title)
    for column, justify in ((("variant", "left"), ("msgs/s", "right"),
                             ("wall-clock overhead [quartiles]", "right"),
                             ("CPU overhead [quartiles]", "right"),
                             ("inside the hooks", "right"),
                             ("their CPU", "right"),
                             ("target (hooks)", "right"), ("", "left"))):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for name, pairs in results.items():
        rate = statistics.median(per_run / wall for wall, _ in pairs.times)
        if name == NONE:
            table.add_row(escape(name), f"{rate:,.0f}", "", "", "", "", "", "",
                          style="bold")
            continue
        cells, medians = [], []
        for k in (0, 1):
            overheads = [ratio[k] - 1 for ratio in pairs.ratios]
            low, _, high = statistics.quantiles(overheads, n=4)
            medians.append(statistics.median(overheads))
            cells.append(escape(f"{medians[-1]:+.1%} [{low:+.0%}, {high:+.0%}]"))
        in_hooks = statistics.median(pairs.in_hooks)
        cells.append(f"{in_hooks:.1%}")
        cells.append(f"{statistics.median(pairs.in_hooks_cpu):.1%}")
        judged = name in JUDGED
        ok = ("PASS" if in_hooks <= TARGET else "FAIL") if judged else ""
        table.add_row(escape(name), f"{rate:,.0f}", *cells,
                      f"<= {TARGET:.0%}" if judged else "(context)", ok,
                      style="green" if ok == "PASS" else "red" if ok == "FAIL" else None)
    return table


async def run_all(args: argparse.Namespace, root: Path, batch: list[Message]) -> list[Table]:
    tables = []
    where = "local namespaces" if args.transport == "local" else "Service Bus (emulator)"
    async with contextlib.AsyncExitStack() as stack:
        emulator = None
        if args.transport == "servicebus":
            emulator = await stack.enter_async_context(EmulatorProcess(
                ("primary", "secondary"), data_dir=root / "emulator",
                queues=[Place.queue(i) for i in range(len(VARIANTS))],
                log=root / "emulator.log"))
        for single in (False, True):
            if args.only and args.only != ("single" if single else "batches"):
                continue
            place = Place(root / ("single" if single else "batches"), emulator)
            chunk = args.single_chunk if single else args.chunk
            results = await measure_sends(place, batch, args.pairs, chunk, single=single)
            what = f"send(one {BODY} B message)" if single else f"send_batch({BATCH} x {BODY} B)"
            tables.append(render(
                f"Send path: AsyncGeoSender.{what}, passive, {where}; medians of "
                f"{args.pairs} pairs", results, chunk * (1 if single else BATCH)))
        if args.only and args.only != "receive":
            return tables
        results = await measure_receives(Place(root / "receive", emulator), args.pairs,
                                         args.messages)
        tables.append(render(
            f"Receive path: AsyncGeoReceiver.run(async no-op handler), {args.messages} "
            f"messages per drain, one copy, {where}; medians of {args.pairs} pairs",
            results, args.messages))
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30,
                        help="pairs (none beside the variant) per variant; medians over these")
    parser.add_argument("--chunk", type=int, default=10, help="batches per timed run")
    parser.add_argument("--single-chunk", type=int, default=100,
                        help="single sends per timed run")
    parser.add_argument("--messages", type=int, default=300,
                        help="messages each receiver drains per timed run")
    parser.add_argument("--transport", choices=("local", "servicebus"), default="local",
                        help="local namespaces, or Service Bus on geogateway emulator")
    parser.add_argument("--only", choices=("batches", "single", "receive"),
                        help="run only this table")
    args = parser.parse_args()
    # Over Service Bus, a receiver closed after its drain gives its prefetched messages
    # back, and their lock renewals end with a warning each: not what is measured.
    logging.getLogger("geogateway").setLevel(logging.ERROR)
    batch = [Message(os.urandom(BODY), message_id=f"bench-{i:05d}") for i in range(BATCH)]
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
        tables = asyncio.run(run_all(args, Path(tmp), batch))
    console = Console(width=150)
    for table in tables:
        console.print(table)


if __name__ == "__main__":
    main()
