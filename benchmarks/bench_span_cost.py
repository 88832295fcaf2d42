"""Benchmark what one send span costs, alone: µs of CPU per span, with and without sampling.

    .venv/bin/python benchmarks/bench_span_cost.py [--runs 9]

A send span as ``AsyncGeoSender`` makes one (``Tracing.send(...)`` entered,
``finished``, left; the send itself is not there) for one message and for 100, on:

- an SDK ``TracerProvider`` recording every span, through a ``BatchSpanProcessor`` into
  an exporter that only counts them;
- the same with ``ParentBased(TraceIdRatioBased(0.1))`` (10% of the traces recorded);
- only the OpenTelemetry API (no SDK: its no-op provider).

Beside them, the SDK's bare ``start_span().end()`` (context). Each figure is the median,
over ``--runs`` runs, of the CPU time of the thread making the spans
(``time.thread_time``: the load of a shared machine moves it much less than the wall
clock; the SDK's export thread is not counted) divided by the spans made.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from rich.console import Console
from rich.table import Table

from gateway.observability import Tracing
from replication import Message


class _Counting(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def cpu_per_call(call: Callable[[], None], n: int, runs: int) -> float:
    """Median µs of this thread's CPU per ``call``."""
    per_run = []
    for _ in range(runs):
        began = time.thread_time()
        for _ in range(n):
            call()
        per_run.append((time.thread_time() - began) / n * 1e6)
    return statistics.median(per_run)


def bare_span(provider: TracerProvider) -> Callable[[], None]:
    tracer = provider.get_tracer("bench")
    return lambda: tracer.start_span("send orders").end()


def send_span(tracing: Tracing, messages: list[Message]) -> Callable[[], None]:
    def call() -> None:
        with tracing.send(system="servicebus", entity="orders", messages=messages) as trace:
            trace.finished(namespaces=("primary",), buffered=(), failed_over=False,
                           hedged=False)
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the SDK's "queue full" if its thread falls behind
    one = [Message(b"x" * 1024, message_id="m-0")]
    hundred = [Message(b"x" * 1024, message_id=f"m-{i}") for i in range(100)]
    table = Table(title=f"one send span: µs of CPU per span (median of {args.runs} runs)")
    for column in ("tracing", "bare SDK span (context)", "1 message", "100 messages"):
        table.add_column(column)
    for label, ratio in (("SDK, every span", None), ("SDK, sampling 10%", 0.1),
                         ("API only (no SDK)", -1.0)):
        provider = None
        if ratio is None or ratio > 0:
            sampler = ParentBased(TraceIdRatioBased(ratio)) if ratio else None
            provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(_Counting(), max_queue_size=100_000))
        tracing = Tracing(tracer_provider=provider)
        bare = "-"
        if provider is not None:
            bare = f"{cpu_per_call(bare_span(provider), 3000, args.runs):.1f}"
        table.add_row(label, bare,
                      f"{cpu_per_call(send_span(tracing, one), 3000, args.runs):.1f}",
                      f"{cpu_per_call(send_span(tracing, hundred), 300, args.runs):.1f}")
        if provider is not None:
            provider.shutdown()
    Console().print(table)


if __name__ == "__main__":
    main()
