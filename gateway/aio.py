"""The async API: ``AsyncGeoSender``, ``AsyncGeoReceiver``,
``AsyncGeoPartitionReceiver``, ``AsyncGeoSessionReceiver`` and ``AsyncOutboxDispatcher``
(close with ``aclose()``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo import (
        AsyncGeoPartitionReceiver,
        AsyncGeoReceiver,
        AsyncGeoSender,
        AsyncGeoSessionReceiver,
        AsyncOutboxDispatcher,
    )

# Imported on first use (PEP 562): the partition receiver brings in the consumer's blob
# checkpoint store (azure-storage), which a sender or a receiver of queues never needs.
_LAZY = {
    "AsyncGeoPartitionReceiver": "gateway.geo",
    "AsyncGeoReceiver": "gateway.geo",
    "AsyncGeoSender": "gateway.geo",
    "AsyncGeoSessionReceiver": "gateway.geo",
    "AsyncOutboxDispatcher": "gateway.geo",
}


__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


__all__ = ["AsyncGeoPartitionReceiver", "AsyncGeoReceiver", "AsyncGeoSender",
           "AsyncGeoSessionReceiver", "AsyncOutboxDispatcher"]
