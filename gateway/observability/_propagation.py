"""The trace context in a message's application properties, as the Azure SDKs carry it.

The Azure SDKs for Service Bus and Event Hubs write the W3C ``traceparent`` of the
message's creation into the application property ``Diagnostic-Id`` (and, in recent
versions, ``traceparent`` too). geogateway writes both, with the same value, and
``tracestate`` when there is one; it reads ``traceparent`` first, then
``Diagnostic-Id``, so a message sent by the SDKs joins the same trace.

Parsing and formatting are done here rather than by the global propagator: they
run for every message, and the format is fixed by the SDKs whatever propagator the
application configured.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from replication import Message, PropertyValue

__all__ = ["DIAGNOSTIC_ID", "TRACEPARENT", "TRACESTATE", "context_properties", "span_context"]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"


def context_properties(span_context: Any) -> dict[str, PropertyValue]:
    """The properties that carry ``span_context`` (an OpenTelemetry ``SpanContext``)."""
    header = (f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
              f"{int(span_context.trace_flags):02x}")
    properties: dict[str, PropertyValue] = {TRACEPARENT: header, DIAGNOSTIC_ID: header}
    state = span_context.trace_state
    if state:
        properties[TRACESTATE] = state.to_header()
    return properties


def span_context(message: Message) -> Any:
    """The remote ``SpanContext`` ``message`` carries, or None (none, or malformed)."""
    return parse(message.properties)


def parse(properties: Mapping[str, PropertyValue]) -> Any:
    """The remote ``SpanContext`` in ``properties``, or None."""
    header = properties.get(TRACEPARENT) or properties.get(DIAGNOSTIC_ID)
    if not isinstance(header, str):
        return None
    state = properties.get(TRACESTATE)
    return _parsed(header, state if isinstance(state, str) else None)


# Both copies of a message, and its receive, process and settle spans, read the same
# header: parsed once (a header is 55 characters; 4096 of them are a few hundred KB).
_TRACEPARENT_RE = re.compile(
    r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def _parsed(header: str, state_header: str | None) -> Any:
    match = _TRACEPARENT_RE.fullmatch(header)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version.lower() == "ff" or (version == "00" and rest):
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags, TraceState

    state = TraceState.from_header([state_header]) if state_header else None
    return SpanContext(trace_id=trace, span_id=span, is_remote=True,
                       trace_flags=TraceFlags(int(flags, 16)), trace_state=state)
