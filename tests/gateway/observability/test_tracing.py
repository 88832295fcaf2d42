"""Tracing in one process: the spans of sends, replays, receives, processing and
settlements, collected with the OpenTelemetry SDK's in-memory exporter, and the trace
context the messages carry (see test_trace_processes.py for two processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, get_current_span

from gateway.aio import AsyncGeoPartitionReceiver
from gateway.consumer import BalanceSettings, ProcessorSettings
from gateway.observability import Tracing, trace_context
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from gateway.transports.base import PartitionEvent, ReceivedMessage
from replication import Message
from tests.gateway.conftest import ENTITY, Namespaces, ReceiverFactory, SenderFactory, wait_for

pytestmark = pytest.mark.anyio

# A context as the Azure SDKs write it (W3C traceparent in Diagnostic-Id).
SDK_TRACE, SDK_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
DIAGNOSTIC_ID = f"00-{SDK_TRACE}-{SDK_SPAN}-01"


class Spans:
    """A tracer provider of the test's own and what it collected."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracing = Tracing(tracer_provider=self.provider)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def attributes(self, span: ReadableSpan) -> dict[str, Any]:
        return dict(span.attributes or {})


@pytest.fixture
def spans() -> Iterator[Spans]:
    collected = Spans()
    yield collected
    collected.provider.shutdown()


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_send_is_a_producer_span_whose_context_the_messages_carry(
    make_sender: SenderFactory, spans: Spans, ns: Namespaces,
) -> None:
    # Given a passive sender that traces
    sender = make_sender(hooks=[spans.tracing])
    # When a batch of two is sent, one carrying a context of its own (from the SDKs)
    own = Message(b"own", message_id="own", properties={"Diagnostic-Id": DIAGNOSTIC_ID})
    await sender.send_batch([Message(b"plain", message_id="plain", properties={"k": 1}), own])
    # Then one send span, following the messaging conventions
    [send] = spans.named(f"send {ENTITY}")
    attributes = spans.attributes(send)
    assert send.kind is SpanKind.PRODUCER
    assert attributes["messaging.system"] == "geogateway_local"
    assert attributes["messaging.destination.name"] == ENTITY
    assert attributes["messaging.operation.type"] == "send"
    assert attributes["messaging.batch.message_count"] == 2
    assert attributes["geogateway.namespaces"] == ("primary",)
    # linked to the context the SDK's message carried, which it keeps
    assert [f"{link.context.trace_id:032x}" for link in send.links] == [SDK_TRACE]
    stored = {r.message_id: r.message.properties for r in await received(ns, "primary")}
    assert stored["own"]["Diagnostic-Id"] == DIAGNOSTIC_ID
    assert "traceparent" not in stored["own"]
    # and the other message carries the send span's own, as traceparent and Diagnostic-Id
    header = traceparent(send)
    assert stored["plain"]["traceparent"] == stored["plain"]["Diagnostic-Id"] == header
    assert stored["plain"]["k"] == 1


async def received(ns: Namespaces, name: str) -> list[ReceivedMessage]:
    async with LocalTransport(name, data_dir=ns.data_dir) as transport:
        return await transport.receive(ENTITY, max_messages=100)


async def test_a_failover_and_an_outage_are_events_of_the_send_that_met_them(
    make_sender: SenderFactory, primary: FaultyTransport, spans: Spans,
) -> None:
    sender = make_sender(hooks=[spans.tracing])
    primary.go_down()
    await sender.send(Message(b"x"))
    [send] = spans.named(f"send {ENTITY}")
    assert [e.name for e in send.events] == ["namespace down", "failover"]
    assert spans.attributes(send)["geogateway.failed_over"] is True


async def test_a_failed_send_is_an_error_span(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
    spans: Spans,
) -> None:
    sender = make_sender(hooks=[spans.tracing])
    primary.go_down()
    secondary.go_down()
    with pytest.raises(Exception, match="no durable queue"):
        await sender.send(Message(b"x"))
    [send] = spans.named(f"send {ENTITY}")
    assert send.status.status_code is StatusCode.ERROR
    assert "exception" in [e.name for e in send.events]


async def test_a_replay_is_a_send_span_linked_to_the_first_sends(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
    spans: Spans, tmp_path: Path,
) -> None:
    # Given two messages buffered while both namespaces were down
    sender = make_sender(hooks=[spans.tracing], durable_queue=tmp_path / "q.db")
    primary.go_down()
    secondary.go_down()
    await sender.send(Message(b"a"))
    await sender.send(Message(b"b"))
    first_sends = spans.named(f"send {ENTITY}")
    assert [e.name for e in first_sends[0].events].count("buffered") == 1
    # When they are replayed
    primary.come_up()
    secondary.come_up()
    assert await sender.replay() == 2
    # Then the replay's send span links to the sends that buffered them
    [replay] = [s for s in spans.named(f"send {ENTITY}")
                if spans.attributes(s).get("geogateway.replay")]
    assert sorted(hex_ids(s) for s in first_sends) == sorted(
        (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}")
        for link in replay.links)


async def test_run_processes_in_the_send_trace_and_settles_with_links(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, spans: Spans,
) -> None:
    # Given a message sent with tracing, and one the handler fails on once
    sender = make_sender(hooks=[spans.tracing])
    await sender.send(Message(b"ok", message_id="ok"))
    await sender.send(Message(b"flaky", message_id="flaky"))
    sends = {spans.attributes(s)["messaging.message.id"]: s
             for s in spans.named(f"send {ENTITY}")}
    receiver = await make_receiver(hooks=[spans.tracing])
    failed: list[str] = []
    done: list[str] = []
    contexts: list[Any] = []

    async def handle(message: ReceivedMessage) -> None:
        contexts.append(get_current_span().get_span_context())
        if message.message_id == "flaky" and not failed:
            failed.append(message.message_id)
            raise RuntimeError("first attempt fails")
        done.append(message.message_id)

    class Done:
        def is_set(self) -> bool:
            return sorted(done) == ["flaky", "ok"] and receiver.stats.abandoned == 1

    # When the receiver runs
    await receiver.run(handle, stop=Done())
    await receiver.aclose()
    # Then each handler call ran inside a process span, a child of its send span
    processes = spans.named(f"process {ENTITY}")
    assert len(processes) == 3
    for process in processes:
        message_id = spans.attributes(process)["messaging.message.id"]
        assert process.parent is not None
        assert process.parent.span_id == sends[message_id].get_span_context().span_id
        assert spans.attributes(process)["messaging.operation.type"] == "process"
        assert spans.attributes(process)["geogateway.namespace"] == "primary"
    assert {c.span_id for c in contexts} == {p.get_span_context().span_id for p in processes}
    # and the failed call is an error span
    errors = [p for p in processes if p.status.status_code is StatusCode.ERROR]
    assert [spans.attributes(p)["messaging.message.id"] for p in errors] == ["flaky"]
    # and the settlements are spans linked to the copies they settled
    settled = {(spans.attributes(s)["messaging.operation.name"],
                (link.attributes or {}).get("messaging.message.id"))
               for s in spans.exporter.get_finished_spans()
               if spans.attributes(s).get("messaging.operation.type") == "settle"
               for link in s.links}
    assert settled == {("abandon", "flaky"), ("complete", "flaky"), ("complete", "ok")}
    # and every copy received is a link of a receive span
    receives = spans.named(f"receive {ENTITY}")
    assert all(s.kind is SpanKind.CONSUMER for s in receives)
    assert sorted((link.attributes or {})["messaging.message.id"]
                  for s in receives for link in s.links) == ["flaky", "flaky", "ok"]


async def test_inbox_handlers_run_concurrently_inside_their_process_spans(
    make_sender: SenderFactory, make_receiver: ReceiverFactory, spans: Spans,
) -> None:
    # Given three messages sent with tracing
    sender = make_sender(hooks=[spans.tracing])
    for i in range(3):
        await sender.send(Message(f"m{i}", message_id=f"id-{i}"))
    sends = {spans.attributes(s)["messaging.message.id"]: s
             for s in spans.named(f"send {ENTITY}")}
    receiver = await make_receiver(hooks=[spans.tracing])
    done: list[str] = []

    def inbox(message: ReceivedMessage, conn: Any) -> None:
        conn.execute("SELECT 1")  # the transaction that marks the id done
        done.append(message.message_id)

    class Done:
        def is_set(self) -> bool:
            return len(done) == 3

    # When an inbox handler runs them, two at a time
    await receiver.run(inbox, stop=Done(), transactional=True, concurrency=2)
    await receiver.aclose()
    # Then each inbox transaction ran inside a process span, a child of its send span
    processes = spans.named(f"process {ENTITY}")
    assert sorted(spans.attributes(p)["messaging.message.id"] for p in processes) == [
        "id-0", "id-1", "id-2"]
    for process in processes:
        message_id = spans.attributes(process)["messaging.message.id"]
        assert process.parent is not None
        assert process.parent.span_id == sends[message_id].get_span_context().span_id
        assert process.status.status_code is not StatusCode.ERROR


def test_trace_context_gives_a_receive_caller_the_sends_context() -> None:
    message = Message(b"x", properties={"Diagnostic-Id": DIAGNOSTIC_ID})
    context = trace_context(message)
    assert context is not None
    span_context = get_current_span(context).get_span_context()
    assert f"{span_context.trace_id:032x}" == SDK_TRACE and span_context.is_remote
    assert trace_context(Message(b"x")) is None
    assert trace_context(Message(b"x", properties={"traceparent": "00-zz-yy-01"})) is None


async def test_without_an_sdk_nothing_is_recorded_and_messages_are_left_alone(
    make_sender: SenderFactory, ns: Namespaces,
) -> None:
    # Given tracing on the global provider, which is the API's no-op one here
    sender = make_sender(hooks=[Tracing()])
    # When a message is sent
    await sender.send(Message(b"x", message_id="x"))
    # Then it carries no trace context (there is no recording span to give it)
    [copy] = await received(ns, "primary")
    assert dict(copy.message.properties) == {}


HUB = "telemetry"
FAST = BalanceSettings(interval=0.05, idle_interval=0.2, heartbeat_interval=0.2,
                       heartbeat_expiry=3.0, fence_margin=0.1, settle_cycles=2)


async def test_the_partition_receiver_processes_events_and_marks_skipped_duplicates(
    tmp_path: Path, spans: Spans,
) -> None:
    # Given an event with its context, in both namespaces (as active replication does)
    event = Message(b"e", message_id="e1", properties={"Diagnostic-Id": DIAGNOSTIC_ID})
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=tmp_path) as admin:
            admin.create_partitioned(HUB, partitions=2)
        async with LocalTransport(name, data_dir=tmp_path) as transport:
            await transport.send(HUB, [event])
    handled: list[PartitionEvent] = []
    geo = AsyncGeoPartitionReceiver(
        primary="local://primary", secondary="local://secondary", entity=HUB,
        data_dir=tmp_path, checkpoint_store=tmp_path / "cp.db",
        dedup_store=tmp_path / "dedup.db", balance=FAST,
        settings=ProcessorSettings(poll_wait=0.05), hooks=[spans.tracing])
    # When the geo receiver has handled it and skipped its other copy
    async with geo:
        await geo.start(handled.append)
        await wait_for(lambda: len(handled) == 1 and geo.dedup_stats.duplicates >= 1)
    # Then the handling is a process span in the sender's trace
    [process] = spans.named(f"process {HUB}")
    attributes = spans.attributes(process)
    assert f"{process.context.trace_id:032x}" == SDK_TRACE
    assert process.parent is not None and f"{process.parent.span_id:016x}" == SDK_SPAN
    assert attributes["messaging.consumer.group.name"] == "$Default"
    assert attributes["messaging.destination.partition.id"] == handled[0].partition_id
    # and the copy skipped is a span of its own there, marked a duplicate
    [skip] = spans.named(f"skip {HUB}")
    assert f"{skip.context.trace_id:032x}" == SDK_TRACE
    assert spans.attributes(skip)["geogateway.duplicate"] is True
    assert spans.attributes(skip)["geogateway.namespace"] != attributes["geogateway.namespace"]
    assert [e.name for e in skip.events] == ["duplicate suppressed"]
