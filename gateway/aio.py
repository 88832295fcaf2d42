"""The async API: ``AsyncGeoSender``, ``AsyncGeoReceiver`` and
``AsyncGeoPartitionReceiver`` (close with ``aclose()``)."""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from gateway._geo_partitions import AsyncGeoPartitionReceiver
    from gateway._receiver import AsyncGeoReceiver
    from gateway._sender import AsyncGeoSender

# Imported on first use (PEP 562): the partition receiver brings in the consumer's blob
# checkpoint store (azure-storage), which a sender or a receiver of queues never needs.
_LAZY = {
    "AsyncGeoPartitionReceiver": "gateway._geo_partitions",
    "AsyncGeoReceiver": "gateway._receiver",
    "AsyncGeoSender": "gateway._sender",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gateway.aio' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["AsyncGeoPartitionReceiver", "AsyncGeoReceiver", "AsyncGeoSender"]
