"""The geo core: the sender and the receiver over two namespaces, their sync drivers,
the geo partition receiver, the geo session receiver, configuration, the transport
factory and the hooks.

Everything here is imported on first use (PEP 562), so that a module that only needs
the hooks or the configuration records does not load the transports and the stores.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo._client import GeoReceiver, GeoSender
    from gateway.geo._config import DedupConfig, DurableQueueConfig, GatewayConfig
    from gateway.geo._factory import NamespaceLike
    from gateway.geo._hooks import GatewayHooks, emit
    from gateway.geo._namespace_config import NamespaceConfig
    from gateway.geo._partitions import AsyncGeoPartitionReceiver, InboxHandler
    from gateway.geo._partitions_sync import GeoPartitionReceiver
    from gateway.geo._receiver import AsyncGeoReceiver, ReceiverStats
    from gateway.geo._recovery import ReplayReport
    from gateway.geo._sender import AsyncGeoSender, SendResult
    from gateway.geo._session_receiver import AsyncGeoSessionReceiver, SessionReceiverStats
    from gateway.geo._session_sync import GeoSessionReceiver

_LAZY = {
    "AsyncGeoPartitionReceiver": "gateway.geo._partitions",
    "AsyncGeoReceiver": "gateway.geo._receiver",
    "AsyncGeoSender": "gateway.geo._sender",
    "AsyncGeoSessionReceiver": "gateway.geo._session_receiver",
    "DedupConfig": "gateway.geo._config",
    "DurableQueueConfig": "gateway.geo._config",
    "GatewayConfig": "gateway.geo._config",
    "GatewayHooks": "gateway.geo._hooks",
    "GeoPartitionReceiver": "gateway.geo._partitions_sync",
    "GeoReceiver": "gateway.geo._client",
    "GeoSender": "gateway.geo._client",
    "GeoSessionReceiver": "gateway.geo._session_sync",
    "InboxHandler": "gateway.geo._partitions",
    "NamespaceConfig": "gateway.geo._namespace_config",
    "NamespaceLike": "gateway.geo._factory",
    "ReceiverStats": "gateway.geo._receiver",
    "ReplayReport": "gateway.geo._recovery",
    "SendResult": "gateway.geo._sender",
    "SessionReceiverStats": "gateway.geo._session_receiver",
    "emit": "gateway.geo._hooks",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "AsyncGeoPartitionReceiver",
    "AsyncGeoReceiver",
    "AsyncGeoSender",
    "AsyncGeoSessionReceiver",
    "DedupConfig",
    "DurableQueueConfig",
    "GatewayConfig",
    "GatewayHooks",
    "GeoPartitionReceiver",
    "GeoReceiver",
    "GeoSender",
    "GeoSessionReceiver",
    "InboxHandler",
    "NamespaceConfig",
    "NamespaceLike",
    "ReceiverStats",
    "ReplayReport",
    "SendResult",
    "SessionReceiverStats",
    "emit",
]
