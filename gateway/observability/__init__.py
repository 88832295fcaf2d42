"""Seeing a gateway at work: health and status endpoints, the status of a
configuration, partition owners and checkpoint lag (and, beside them, metrics).

``create_app(config)`` is the ASGI app (starlette) that ``geogateway serve`` runs:
``/healthz``, ``/readyz``, ``/metrics`` and ``/status``; ``collect_status(config)``
is what ``geogateway status`` prints. starlette, uvicorn and prometheus-client are
the ``serve`` extra (``pip install 'geogateway[serve]'``).

Imported on first use (PEP 562): ``import gateway`` loads none of these modules, nor
starlette or prometheus_client behind them.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.observability._app import create_app, metrics_exposition, wants_html
    from gateway.observability._collect import (
        DEFAULT_PROBE_DEADLINE,
        StatusReader,
        StoreLike,
        collect_status,
    )
    from gateway.observability._html import status_page
    from gateway.observability._partitions import (
        ConsumerNamespaceStatus,
        LocalPartitions,
        PartitionStatus,
        consumer_status,
        local_partitions,
    )
    from gateway.observability._status import (
        Backlog,
        ConsumerStatus,
        GatewayStatus,
        NamespaceHealth,
        QueueHealth,
    )

_LAZY = {
    "DEFAULT_PROBE_DEADLINE": "gateway.observability._collect",
    "Backlog": "gateway.observability._status",
    "ConsumerNamespaceStatus": "gateway.observability._partitions",
    "ConsumerStatus": "gateway.observability._status",
    "GatewayStatus": "gateway.observability._status",
    "LocalPartitions": "gateway.observability._partitions",
    "NamespaceHealth": "gateway.observability._status",
    "PartitionStatus": "gateway.observability._partitions",
    "QueueHealth": "gateway.observability._status",
    "StatusReader": "gateway.observability._collect",
    "StoreLike": "gateway.observability._collect",
    "collect_status": "gateway.observability._collect",
    "consumer_status": "gateway.observability._partitions",
    "create_app": "gateway.observability._app",
    "local_partitions": "gateway.observability._partitions",
    "metrics_exposition": "gateway.observability._app",
    "status_page": "gateway.observability._html",
    "wants_html": "gateway.observability._app",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "DEFAULT_PROBE_DEADLINE",
    "Backlog",
    "ConsumerNamespaceStatus",
    "ConsumerStatus",
    "GatewayStatus",
    "LocalPartitions",
    "NamespaceHealth",
    "PartitionStatus",
    "QueueHealth",
    "StatusReader",
    "StoreLike",
    "collect_status",
    "consumer_status",
    "create_app",
    "local_partitions",
    "metrics_exposition",
    "status_page",
    "wants_html",
]
