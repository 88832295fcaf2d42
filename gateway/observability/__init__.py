"""Observability: Prometheus metrics and OpenTelemetry traces (optional extras).

``PrometheusMetrics`` and ``Tracing`` are hooks: give them to a sender, receiver,
partition receiver or relay client (``hooks=[...]``), or turn them on in the
configuration file (``[metrics] enabled = true``, ``[tracing] enabled = true``;
``hooks_from_config``). ``render_metrics`` is what a ``/metrics`` endpoint answers.

Everything here is imported on first use (PEP 562): ``import gateway`` never loads
``prometheus_client`` or ``opentelemetry``, and neither is needed until asked for.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.observability._config import hooks_from_config
    from gateway.observability._metrics import PrometheusMetrics, render_metrics
    from gateway.observability._tracing import Tracing, trace_context

_LAZY = {
    "PrometheusMetrics": "gateway.observability._metrics",
    "Tracing": "gateway.observability._tracing",
    "hooks_from_config": "gateway.observability._config",
    "render_metrics": "gateway.observability._metrics",
    "trace_context": "gateway.observability._tracing",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "PrometheusMetrics",
    "Tracing",
    "hooks_from_config",
    "render_metrics",
    "trace_context",
]
