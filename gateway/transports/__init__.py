"""Transports: one seam per kind of namespace.

:class:`LocalTransport` (``local://NAME``, an embedded SQLite namespace that
several processes can share and take down) and :class:`FaultyTransport` (a
wrapper that injects outages, latency and lost replies) implement
:class:`Transport`.
"""

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
