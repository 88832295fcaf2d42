"""geogateway: keep sending and receiving while a whole namespace is down.

Sync API here; the async twins are in :mod:`gateway.aio`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._client import GeoReceiver, GeoSender
from gateway._config import DedupConfig, DurableQueueConfig, GatewayConfig, NamespaceConfig
from gateway._dedup_store import SqliteDedupStore
from gateway._hooks import GatewayHooks
from gateway._receiver import ReceiverStats
from gateway._sender import SendResult
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
from gateway.transports.base import ReceivedMessage, ReceiveMode
from replication import Message
from replication._dedup import DedupStore, DedupWindow, InMemoryDedupStore
from replication._policy import Mode, ReplicationPolicy, RetryPolicy

if _TYPE_CHECKING:
    from gateway._geo_partitions import GeoPartitionReceiver

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Imported on first use: it brings in the consumer and its blob store (azure-storage),
    # which the CLI, the emulator and a sender do not need.
    if name == "GeoPartitionReceiver":
        from gateway._geo_partitions import GeoPartitionReceiver

        return GeoPartitionReceiver
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")

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
