"""One trace across two processes: a real child process sends with tracing on (its
spans collected by the OpenTelemetry SDK's in-memory exporter and written to a file),
this process receives and handles with tracing on (its own in-memory exporter), and
the spans of both join up through the ``traceparent`` / ``Diagnostic-Id`` properties
the messages carried.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.aio import AsyncGeoReceiver
from gateway.observability import Tracing
from gateway.transports import LocalNamespace
from tests.gateway.observability.trace_child import ENTITY, as_json

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
IDS = ("first", "second", "both")


class Delivered:
    """A stop flag for ``run``: set once every id was handled and the second copy of
    ``both`` was suppressed."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.receiver: AsyncGeoReceiver | None = None

    async def handle(self, message: Any) -> None:
        self.ids.append(message.message_id)

    def is_set(self) -> bool:
        assert self.receiver is not None
        return (set(self.ids) == set(IDS)
                and self.receiver.stats.duplicates_suppressed >= 1)


async def test_one_trace_joins_the_send_in_one_process_and_the_processing_in_another(
    tmp_path: Path,
) -> None:
    # Given two local namespaces with a queue
    data_dir = tmp_path / "namespaces"
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data_dir) as namespace:
            namespace.create_queue(ENTITY)
    # When a child process sends with tracing on (a failover on the way)
    out = tmp_path / "sender-spans.jsonl"
    with anyio.fail_after(120):
        child = await anyio.run_process(
            [sys.executable, "-m", "tests.gateway.observability.trace_child",
             str(data_dir), str(tmp_path / "state"), str(out)], cwd=ROOT, check=False)
    assert child.returncode == 0, child.stderr.decode()
    sent = [json.loads(line) for line in out.read_text().splitlines()]
    # and this process receives and handles them with tracing on
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    delivered = Delivered()
    receiver = AsyncGeoReceiver(primary="local://primary", secondary="local://secondary",
                                entity=ENTITY, data_dir=data_dir,
                                dedup_store=tmp_path / "dedup.db",
                                hooks=[Tracing(tracer_provider=provider)])
    delivered.receiver = receiver
    async with receiver:
        await receiver.run(delivered.handle, stop=delivered)
    provider.shutdown()
    received = [as_json(span) for span in exporter.get_finished_spans()]
    # Then each message's processing here is a child of its send span there
    sends = {s["attributes"]["messaging.message.id"]: s for s in sent
             if s["name"] == f"send {ENTITY}"}
    processes = {s["attributes"]["messaging.message.id"]: s for s in received
                 if s["name"] == f"process {ENTITY}"}
    assert set(sends) == set(processes) == set(IDS)
    for message_id in IDS:
        send, process = sends[message_id], processes[message_id]
        assert process["trace_id"] == send["trace_id"], message_id
        assert process["parent_id"] == send["span_id"], message_id
        assert send["kind"] == "PRODUCER" and process["kind"] == "CONSUMER"
        for span in (send, process):
            assert span["attributes"]["messaging.system"] == "geogateway_local"
            assert span["attributes"]["messaging.destination.name"] == ENTITY
        assert send["attributes"]["messaging.operation.type"] == "send"
        assert process["attributes"]["messaging.operation.type"] == "process"
    # and the failover is in the trace of the send that failed over
    assert "failover" in sends["second"]["events"]
    assert sends["second"]["attributes"]["geogateway.failed_over"] is True
    assert process_namespace(processes["second"]) == "secondary"
    # and every copy received, from either namespace, is a link of a receive span
    contexts = {m: f"{s['trace_id']}-{s['span_id']}" for m, s in sends.items()}
    links = [link for s in received if s["name"] == f"receive {ENTITY}" for link in s["links"]]
    assert sorted(links) == sorted([contexts["first"], contexts["second"],
                                    contexts["both"], contexts["both"]])
    # and the second copy of "both" shows in its trace as a suppressed duplicate
    duplicates = [s for s in received if s["attributes"].get("geogateway.duplicate")]
    assert len(duplicates) == 1
    assert duplicates[0]["trace_id"] == sends["both"]["trace_id"]
    assert duplicates[0]["parent_id"] == sends["both"]["span_id"]
    assert duplicates[0]["attributes"]["messaging.operation.type"] == "settle"
    assert "duplicate suppressed" in duplicates[0]["events"]
    assert delivered.ids.count("both") == 1


def process_namespace(span: dict[str, Any]) -> str:
    return str(span["attributes"]["geogateway.namespace"])
