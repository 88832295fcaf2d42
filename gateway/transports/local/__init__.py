"""The local namespace (``local://NAME``): an embedded SQLite namespace that several
processes can share and take down, and its transport.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports.local._control import (
        ControlFile,
        ControlState,
        default_data_dir,
        namespace_files,
        prepare_data_dir,
    )
    from gateway.transports.local._entities import EntityInfo, EntityKind
    from gateway.transports.local._events import LEASE
    from gateway.transports.local._namespace import LocalNamespace, NamespaceStatus, PartitionInfo
    from gateway.transports.local._queues import Queued
    from gateway.transports.local._store import DEAD_LETTER_SUFFIX, Store
    from gateway.transports.local._transport import LocalTransport

_LAZY = {
    "ControlFile": "gateway.transports.local._control",
    "ControlState": "gateway.transports.local._control",
    "DEAD_LETTER_SUFFIX": "gateway.transports.local._store",
    "default_data_dir": "gateway.transports.local._control",
    "EntityInfo": "gateway.transports.local._entities",
    "EntityKind": "gateway.transports.local._entities",
    "LEASE": "gateway.transports.local._events",
    "LocalNamespace": "gateway.transports.local._namespace",
    "LocalTransport": "gateway.transports.local._transport",
    "namespace_files": "gateway.transports.local._control",
    "NamespaceStatus": "gateway.transports.local._namespace",
    "PartitionInfo": "gateway.transports.local._namespace",
    "prepare_data_dir": "gateway.transports.local._control",
    "Queued": "gateway.transports.local._queues",
    "Store": "gateway.transports.local._store",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "LEASE",
    "ControlFile",
    "ControlState",
    "EntityInfo",
    "EntityKind",
    "LocalNamespace",
    "LocalTransport",
    "NamespaceStatus",
    "PartitionInfo",
    "Queued",
    "Store",
    "default_data_dir",
    "namespace_files",
    "prepare_data_dir",
]
