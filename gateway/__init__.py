"""geogateway: keep sending and receiving while a whole namespace is down.

Sync API here; the async twins are in :mod:`gateway.aio`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._lazy import lazy_dir as _lazy_dir
from gateway._lazy import lazy_exports as _lazy_exports
from gateway.errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    TransportError,
)

if _TYPE_CHECKING:
    from gateway._client import GeoReceiver, GeoSender
    from gateway._config import (
        DedupConfig,
        DurableQueueConfig,
        GatewayConfig,
        NamespaceConfig,
    )
    from gateway._dedup_store import SqliteDedupStore
    from gateway._geo_partitions import GeoPartitionReceiver
    from gateway._hooks import GatewayHooks
    from gateway._receiver import ReceiverStats
    from gateway._sender import SendResult
    from gateway.transports.base import ReceivedMessage, ReceiveMode
    from replication import Message
    from replication._dedup import DedupStore, DedupWindow, InMemoryDedupStore
    from replication._policy import Mode, ReplicationPolicy, RetryPolicy

__version__ = "0.1.0"

# Everything else is imported on first use (PEP 562): the sender and receiver bring in
# SQLite stores and the transports, the consumer its blob store (azure-storage), and the
# `geogateway` command and a process that only needs the errors need none of them.
_LAZY = {
    "DedupConfig": "gateway._config",
    "DedupStore": "replication._dedup",
    "DedupWindow": "replication._dedup",
    "DurableQueueConfig": "gateway._config",
    "GatewayConfig": "gateway._config",
    "GatewayHooks": "gateway._hooks",
    "GeoPartitionReceiver": "gateway._geo_partitions",
    "GeoReceiver": "gateway._client",
    "GeoSender": "gateway._client",
    "InMemoryDedupStore": "replication._dedup",
    "Message": "replication",
    "Mode": "replication._policy",
    "NamespaceConfig": "gateway._config",
    "ReceiveMode": "gateway.transports.base",
    "ReceivedMessage": "gateway.transports.base",
    "ReceiverStats": "gateway._receiver",
    "ReplicationPolicy": "replication._policy",
    "RetryPolicy": "replication._policy",
    "SendResult": "gateway._sender",
    "SqliteDedupStore": "gateway._dedup_store",
}


__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


__all__ = [
    "ConfigError",
    "DedupConfig",
    "DedupStore",
    "DedupWindow",
    "DurableQueueConfig",
    "DurableQueueError",
    "GatewayConfig",
    "GatewayError",
    "GatewayHooks",
    "GeoPartitionReceiver",
    "GeoReceiver",
    "GeoSender",
    "InMemoryDedupStore",
    "Message",
    "MessageRejected",
    "Mode",
    "NamespaceConfig",
    "NamespaceUnavailable",
    "OperationTimeout",
    "OwnershipLost",
    "QueueCorrupt",
    "QueueFull",
    "ReceiveMode",
    "ReceivedMessage",
    "ReceiverStats",
    "ReplicationPolicy",
    "RetryPolicy",
    "SendResult",
    "SqliteDedupStore",
    "TransportError",
    "__version__",
]
