"""Transports: one seam per kind of namespace.

:class:`LocalTransport` (``local://NAME``, an embedded SQLite namespace that
several processes can share and take down) and :class:`FaultyTransport` (a
wrapper that injects outages, latency and lost replies) implement
:class:`Transport`.

The local namespace's parts that other rooms use are here too: its control file
(:class:`ControlFile`, :func:`namespace_files`, :func:`prepare_data_dir`), which the
CLI and the emulators read to take a namespace down, and its storage engine
(:class:`Store`, :class:`Queued`, :data:`LEASE`, :data:`DEAD_LETTER_SUFFIX`), which the
AMQP emulator serves to the Azure SDKs.

Topics' subscriptions are named ``TOPIC/Subscriptions/SUB`` (:func:`subscription_path`,
:func:`canonical_entity`) and select messages with :class:`Rule` s: a
:class:`TrueFilter`, :class:`FalseFilter`, :class:`CorrelationFilter` or
:class:`SqlFilter`, and an optional :class:`SqlRuleAction`.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports._topic_paths import (
        canonical_entity,
        split_subscription,
        subscription_path,
    )
    from gateway.transports.base import (
        EventPosition,
        PartitionEvent,
        ReceivedMessage,
        ReceiveMode,
        SessionReceiver,
        Transport,
    )
    from gateway.transports.faults import FaultyTransport
    from gateway.transports.filters import (
        CorrelationFilter,
        FalseFilter,
        Rule,
        SqlFilter,
        SqlRuleAction,
        TrueFilter,
    )
    from gateway.transports.local import (
        DEAD_LETTER_SUFFIX,
        LEASE,
        ControlFile,
        ControlState,
        EntityInfo,
        EntityKind,
        LocalNamespace,
        LocalTransport,
        NamespaceStatus,
        PartitionInfo,
        Queued,
        Store,
        default_data_dir,
        namespace_files,
        prepare_data_dir,
    )

# Imported on first use (PEP 562), so that a submodule (the control file of a local
# namespace, say) can be imported without the SQLite store and anyio behind the rest.
_LAZY = {
    "CorrelationFilter": "gateway.transports.filters",
    "FalseFilter": "gateway.transports.filters",
    "Rule": "gateway.transports.filters",
    "SqlFilter": "gateway.transports.filters",
    "SqlRuleAction": "gateway.transports.filters",
    "TrueFilter": "gateway.transports.filters",
    "canonical_entity": "gateway.transports._topic_paths",
    "split_subscription": "gateway.transports._topic_paths",
    "subscription_path": "gateway.transports._topic_paths",
    "ControlFile": "gateway.transports.local",
    "ControlState": "gateway.transports.local",
    "DEAD_LETTER_SUFFIX": "gateway.transports.local",
    "LEASE": "gateway.transports.local",
    "Queued": "gateway.transports.local",
    "Store": "gateway.transports.local",
    "namespace_files": "gateway.transports.local",
    "prepare_data_dir": "gateway.transports.local",
    "EntityInfo": "gateway.transports.local",
    "EntityKind": "gateway.transports.local",
    "EventPosition": "gateway.transports.base",
    "FaultyTransport": "gateway.transports.faults",
    "LocalNamespace": "gateway.transports.local",
    "LocalTransport": "gateway.transports.local",
    "NamespaceStatus": "gateway.transports.local",
    "PartitionEvent": "gateway.transports.base",
    "PartitionInfo": "gateway.transports.local",
    "ReceiveMode": "gateway.transports.base",
    "ReceivedMessage": "gateway.transports.base",
    "SessionReceiver": "gateway.transports.base",
    "Transport": "gateway.transports.base",
    "default_data_dir": "gateway.transports.local",
}


__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)


__all__ = [
    "DEAD_LETTER_SUFFIX",
    "LEASE",
    "ControlFile",
    "ControlState",
    "CorrelationFilter",
    "EntityInfo",
    "EntityKind",
    "EventPosition",
    "FalseFilter",
    "FaultyTransport",
    "LocalNamespace",
    "LocalTransport",
    "NamespaceStatus",
    "PartitionEvent",
    "PartitionInfo",
    "Queued",
    "ReceiveMode",
    "ReceivedMessage",
    "Rule",
    "SessionReceiver",
    "SqlFilter",
    "SqlRuleAction",
    "Store",
    "Transport",
    "TrueFilter",
    "canonical_entity",
    "default_data_dir",
    "namespace_files",
    "prepare_data_dir",
    "split_subscription",
    "subscription_path",
]
