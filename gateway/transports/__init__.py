"""Transports: one seam per kind of namespace.

:class:`LocalTransport` (``local://NAME``, an embedded SQLite namespace that
several processes can share and take down) and :class:`FaultyTransport` (a
wrapper that injects outages, latency and lost replies) implement
:class:`Transport`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._lazy import lazy_dir as _lazy_dir
from gateway._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .base import EventPosition, PartitionEvent, ReceivedMessage, ReceiveMode, Transport
    from .faults import FaultyTransport
    from .local import (
        EntityInfo,
        EntityKind,
        LocalNamespace,
        LocalTransport,
        NamespaceStatus,
        PartitionInfo,
        default_data_dir,
    )

# Imported on first use (PEP 562), so that a submodule (the control file of a local
# namespace, say) can be imported without the SQLite store and anyio behind the rest.
_LAZY = {
    "EntityInfo": ".local",
    "EntityKind": ".local",
    "EventPosition": ".base",
    "FaultyTransport": ".faults",
    "LocalNamespace": ".local",
    "LocalTransport": ".local",
    "NamespaceStatus": ".local",
    "PartitionEvent": ".base",
    "PartitionInfo": ".local",
    "ReceiveMode": ".base",
    "ReceivedMessage": ".base",
    "Transport": ".base",
    "default_data_dir": ".local",
}


__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


__all__ = [
    "EntityInfo",
    "EntityKind",
    "EventPosition",
    "FaultyTransport",
    "LocalNamespace",
    "LocalTransport",
    "NamespaceStatus",
    "PartitionEvent",
    "PartitionInfo",
    "ReceiveMode",
    "ReceivedMessage",
    "Transport",
    "default_data_dir",
]
