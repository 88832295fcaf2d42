"""geogateway: keep sending and receiving while a whole namespace is down.

Sync API here; the async twins are in :mod:`gateway.aio`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports
from gateway.errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceMisconfigured,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    SessionLockLost,
    StoreUnavailable,
    TransportError,
)

if _TYPE_CHECKING:
    from gateway.geo import (
        DedupConfig,
        DispatcherStats,
        DurableQueueConfig,
        GatewayConfig,
        GatewayHooks,
        GeoPartitionReceiver,
        GeoReceiver,
        GeoSender,
        GeoSessionReceiver,
        NamespaceConfig,
        OutboxDispatcher,
        ReceiverStats,
        ReplayReport,
        SendResult,
        SessionReceiverStats,
    )
    from gateway.stores import (
        FallbackDedupStore,
        OutboxStats,
        PostgresDedupStore,
        PostgresOutbox,
        SqliteDedupStore,
        SqliteOutbox,
    )
    from gateway.transports.base import ReceivedMessage, ReceiveMode
    from replication import (
        DeadlinePolicy,
        DedupStore,
        DedupWindow,
        InMemoryDedupStore,
        Message,
        Mode,
        ReplicationPolicy,
        RetryPolicy,
    )

__version__ = "0.1.0"
"""The version of geogateway: the distribution's (pyproject.toml reads it from here) and
``geogateway --version``'s. CHANGELOG.md says what each one brought."""

# Everything else is imported on first use (PEP 562): the sender and receiver bring in
# SQLite stores and the transports, the consumer its blob store (azure-storage), and the
# `geogateway` command and a process that only needs the errors need none of them.
_LAZY = {
    "DeadlinePolicy": "replication",
    "DedupConfig": "gateway.geo",
    "DedupStore": "replication",
    "DedupWindow": "replication",
    "DispatcherStats": "gateway.geo",
    "DurableQueueConfig": "gateway.geo",
    "FallbackDedupStore": "gateway.stores",
    "GatewayConfig": "gateway.geo",
    "GatewayHooks": "gateway.geo",
    "GeoPartitionReceiver": "gateway.geo",
    "GeoReceiver": "gateway.geo",
    "GeoSender": "gateway.geo",
    "GeoSessionReceiver": "gateway.geo",
    "InMemoryDedupStore": "replication",
    "Message": "replication",
    "Mode": "replication",
    "NamespaceConfig": "gateway.geo",
    "PostgresDedupStore": "gateway.stores",
    "OutboxDispatcher": "gateway.geo",
    "OutboxStats": "gateway.stores",
    "PostgresOutbox": "gateway.stores",
    "ReceiveMode": "gateway.transports.base",
    "ReceivedMessage": "gateway.transports.base",
    "ReceiverStats": "gateway.geo",
    "ReplayReport": "gateway.geo",
    "ReplicationPolicy": "replication",
    "RetryPolicy": "replication",
    "SendResult": "gateway.geo",
    "SessionReceiverStats": "gateway.geo",
    "SqliteDedupStore": "gateway.stores",
    "SqliteOutbox": "gateway.stores",
}


__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


__all__ = [
    "ConfigError",
    "DeadlinePolicy",
    "DedupConfig",
    "DedupStore",
    "DedupWindow",
    "DispatcherStats",
    "DurableQueueConfig",
    "DurableQueueError",
    "FallbackDedupStore",
    "GatewayConfig",
    "GatewayError",
    "GatewayHooks",
    "GeoPartitionReceiver",
    "GeoReceiver",
    "GeoSender",
    "GeoSessionReceiver",
    "InMemoryDedupStore",
    "Message",
    "MessageRejected",
    "MessageTooLarge",
    "Mode",
    "NamespaceConfig",
    "NamespaceMisconfigured",
    "NamespaceRefused",
    "NamespaceUnavailable",
    "OperationTimeout",
    "OutboxDispatcher",
    "OutboxStats",
    "OwnershipLost",
    "PostgresDedupStore",
    "PostgresOutbox",
    "QueueCorrupt",
    "QueueFull",
    "ReceiveMode",
    "ReceivedMessage",
    "ReceiverStats",
    "ReplayReport",
    "ReplicationPolicy",
    "RetryPolicy",
    "SendResult",
    "SessionLockLost",
    "SessionReceiverStats",
    "SqliteDedupStore",
    "SqliteOutbox",
    "StoreUnavailable",
    "TransportError",
    "__version__",
]
