"""The geo partition receiver: partitions read in both namespaces, de-duplicated."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo.partitions._dedup import InboxHandler
    from gateway.geo.partitions._receiver import AsyncGeoPartitionReceiver
    from gateway.geo.partitions._sync import GeoPartitionReceiver

_LAZY = {
    "AsyncGeoPartitionReceiver": "gateway.geo.partitions._receiver",
    "GeoPartitionReceiver": "gateway.geo.partitions._sync",
    "InboxHandler": "gateway.geo.partitions._dedup",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "AsyncGeoPartitionReceiver",
    "GeoPartitionReceiver",
    "InboxHandler",
]
