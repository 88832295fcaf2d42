"""The outbox dispatcher: committed outbox rows sent through the geo sender."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo.outbox._dispatcher import AsyncOutboxDispatcher, DispatcherStats
    from gateway.geo.outbox._sync import OutboxDispatcher

_LAZY = {
    "AsyncOutboxDispatcher": "gateway.geo.outbox._dispatcher",
    "DispatcherStats": "gateway.geo.outbox._dispatcher",
    "OutboxDispatcher": "gateway.geo.outbox._sync",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "AsyncOutboxDispatcher",
    "DispatcherStats",
    "OutboxDispatcher",
]
