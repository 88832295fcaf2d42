"""The geo core: the sender and the receiver over two namespaces, their sync drivers,
the geo partition receiver, the geo session receiver, the outbox dispatcher,
configuration, the transport factory and the hooks.

Everything here is imported on first use (PEP 562), so that a module that only needs
the hooks or the configuration records does not load the transports and the stores.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo._client import GeoReceiver, GeoSender
    from gateway.geo._config import DurableQueueConfig, GatewayConfig, ObservabilityConfig
    from gateway.geo._dedup_config import DedupConfig, dedup_layer
    from gateway.geo._factory import NamespaceLike, default_state_dir, open_transport
    from gateway.geo._hooks import GatewayHooks, emit
    from gateway.geo._namespace_config import NamespaceConfig
    from gateway.geo._tracing import LOCAL_SYSTEM, MessageTracer, SendTrace, messaging_system
    from gateway.geo.outbox import AsyncOutboxDispatcher, DispatcherStats, OutboxDispatcher
    from gateway.geo.partitions import AsyncGeoPartitionReceiver, GeoPartitionReceiver, InboxHandler
    from gateway.geo.receiver import AsyncGeoReceiver, MessageInboxHandler, ReceiverStats
    from gateway.geo.sender import AsyncGeoSender, ReplayReport, SendResult
    from gateway.geo.sessions import (
        AsyncGeoSessionReceiver,
        GeoSessionReceiver,
        SessionReceiverStats,
    )

_LAZY = {
    "LOCAL_SYSTEM": "gateway.geo._tracing",
    "AsyncGeoPartitionReceiver": "gateway.geo.partitions",
    "AsyncGeoReceiver": "gateway.geo.receiver",
    "AsyncGeoSender": "gateway.geo.sender",
    "AsyncGeoSessionReceiver": "gateway.geo.sessions",
    "AsyncOutboxDispatcher": "gateway.geo.outbox",
    "DedupConfig": "gateway.geo._dedup_config",
    "DispatcherStats": "gateway.geo.outbox",
    "OutboxDispatcher": "gateway.geo.outbox",
    "DurableQueueConfig": "gateway.geo._config",
    "GatewayConfig": "gateway.geo._config",
    "GatewayHooks": "gateway.geo._hooks",
    "GeoPartitionReceiver": "gateway.geo.partitions",
    "GeoReceiver": "gateway.geo._client",
    "GeoSender": "gateway.geo._client",
    "GeoSessionReceiver": "gateway.geo.sessions",
    "InboxHandler": "gateway.geo.partitions",
    "MessageTracer": "gateway.geo._tracing",
    "NamespaceConfig": "gateway.geo._namespace_config",
    "NamespaceLike": "gateway.geo._factory",
    "ObservabilityConfig": "gateway.geo._config",
    "ReceiverStats": "gateway.geo.receiver",
    "MessageInboxHandler": "gateway.geo.receiver",
    "ReplayReport": "gateway.geo.sender",
    "SendResult": "gateway.geo.sender",
    "SendTrace": "gateway.geo._tracing",
    "SessionReceiverStats": "gateway.geo.sessions",
    "default_state_dir": "gateway.geo._factory",
    "dedup_layer": "gateway.geo._dedup_config",
    "emit": "gateway.geo._hooks",
    "messaging_system": "gateway.geo._tracing",
    "open_transport": "gateway.geo._factory",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "LOCAL_SYSTEM",
    "AsyncGeoPartitionReceiver",
    "AsyncGeoReceiver",
    "AsyncGeoSender",
    "AsyncGeoSessionReceiver",
    "AsyncOutboxDispatcher",
    "DedupConfig",
    "DispatcherStats",
    "DurableQueueConfig",
    "GatewayConfig",
    "GatewayHooks",
    "GeoPartitionReceiver",
    "GeoReceiver",
    "GeoSender",
    "GeoSessionReceiver",
    "InboxHandler",
    "MessageInboxHandler",
    "MessageTracer",
    "NamespaceConfig",
    "NamespaceLike",
    "ObservabilityConfig",
    "OutboxDispatcher",
    "ReceiverStats",
    "ReplayReport",
    "SendResult",
    "SendTrace",
    "SessionReceiverStats",
    "dedup_layer",
    "default_state_dir",
    "emit",
    "messaging_system",
    "open_transport",
]
