"""The sending process of the two-process trace test: sends three messages with
tracing on and writes its finished spans, one JSON object a line, to a file.

    python -m tests.gateway.observability.trace_child DATA_DIR STATE_DIR OUT

``first`` goes to the primary; then the primary goes down and ``second`` fails over
to the secondary; the primary comes back and ``both`` is sent in active mode (a copy
in each namespace).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway import GeoSender
from gateway.observability import Tracing
from gateway.transports import LocalNamespace
from replication import Message

ENTITY = "orders"


def as_json(span: ReadableSpan) -> dict[str, Any]:
    """What the test compares: names, ids (hex), parent, attributes, events, links."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": {k: v if isinstance(v, (str, int, float, bool)) else list(v)
                       for k, v in (span.attributes or {}).items()},
        "events": [event.name for event in span.events],
        "links": [f"{link.context.trace_id:032x}-{link.context.span_id:016x}"
                  for link in span.links],
    }


def main(data_dir: Path, state_dir: Path, out: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(tracer_provider=provider)
    common: dict[str, Any] = {"primary": "local://primary", "secondary": "local://secondary",
                              "entity": ENTITY, "data_dir": data_dir, "hooks": [tracing],
                              "recovery": False}
    primary = LocalNamespace("primary", data_dir=data_dir)
    with GeoSender(mode="passive", state_dir=state_dir / "passive", **common) as sender:
        sender.send(Message(b"first", message_id="first"))
        primary.down()
        result = sender.send(Message(b"second", message_id="second"))
        assert result.failed_over and result.namespaces == ("secondary",), result
    primary.up()
    with GeoSender(mode="active", state_dir=state_dir / "active", **common) as sender:
        result = sender.send(Message(b"both", message_id="both"))
        assert sorted(result.namespaces) == ["primary", "secondary"], result
    primary.close()
    provider.shutdown()
    with out.open("w") as fp:
        for span in exporter.get_finished_spans():
            fp.write(json.dumps(as_json(span)) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
