"""Pure replication policy: no I/O of its own and no azure import.

Active and passive replication, role state, failure classification, per-operation
deadlines and hedged sends, the ``MessageId`` de-duplicator, the error tree and the
message record.

The error tree is imported with the package; every other name on first use (PEP 562),
so that what needs only the errors (``geogateway --help``, ``import gateway``) does not
pay for the de-duplicator, the deadlines and the sessions (and the ``dataclasses``,
``inspect``, ``hashlib``, ``uuid`` and ``random`` they bring in).
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from replication._errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceMisconfigured,
    NamespaceRefused,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    SessionLockLost,
    StoreUnavailable,
    TransportError,
)

if _TYPE_CHECKING:
    from replication._deadlines import (
        RECEIVE_DEADLINES,
        DeadlineEstimator,
        DeadlinePolicy,
        LatencyWindow,
        Operation,
    )
    from replication._dedup import (
        DEFAULT_DEDUP_WINDOW,
        Deduplicator,
        DedupStats,
        DedupStore,
        DedupWindow,
        InMemoryDedupStore,
        TransactionalDedupStore,
        Verdict,
    )
    from replication._dedup_scope import ScopedDedupStore, scoped
    from replication._hedging import (
        Attempt,
        AttemptState,
        HedgeStep,
        SendProgress,
        next_hedge_step,
    )
    from replication._message import Message, PropertyValue, with_properties
    from replication._policy import Mode, ReplicationPolicy, RetryPolicy
    from replication._roles import RoleState
    from replication._routing import (
        ANY_NAMESPACE,
        Failure,
        SendPlan,
        classify,
        destination,
        parse_destination,
        plan_send,
        replayable,
        retry_in_namespace,
        should_fail_back,
    )
    from replication._sessions import (
        SESSION_POSITION,
        ReorderBuffer,
        SessionGap,
        SessionOffer,
        session_position,
    )

#: Exported name -> the module that defines it, imported on first use.
_LAZY = {
    "ANY_NAMESPACE": "replication._routing",
    "Attempt": "replication._hedging",
    "AttemptState": "replication._hedging",
    "classify": "replication._routing",
    "DeadlineEstimator": "replication._deadlines",
    "DeadlinePolicy": "replication._deadlines",
    "Deduplicator": "replication._dedup",
    "DedupStats": "replication._dedup",
    "DedupStore": "replication._dedup",
    "DedupWindow": "replication._dedup",
    "DEFAULT_DEDUP_WINDOW": "replication._dedup",
    "destination": "replication._routing",
    "Failure": "replication._routing",
    "HedgeStep": "replication._hedging",
    "SendProgress": "replication._hedging",
    "InMemoryDedupStore": "replication._dedup",
    "LatencyWindow": "replication._deadlines",
    "Message": "replication._message",
    "Mode": "replication._policy",
    "next_hedge_step": "replication._hedging",
    "Operation": "replication._deadlines",
    "parse_destination": "replication._routing",
    "plan_send": "replication._routing",
    "PropertyValue": "replication._message",
    "RECEIVE_DEADLINES": "replication._deadlines",
    "ReorderBuffer": "replication._sessions",
    "replayable": "replication._routing",
    "ReplicationPolicy": "replication._policy",
    "retry_in_namespace": "replication._routing",
    "RetryPolicy": "replication._policy",
    "RoleState": "replication._roles",
    "scoped": "replication._dedup_scope",
    "ScopedDedupStore": "replication._dedup_scope",
    "SendPlan": "replication._routing",
    "SESSION_POSITION": "replication._sessions",
    "session_position": "replication._sessions",
    "SessionGap": "replication._sessions",
    "SessionOffer": "replication._sessions",
    "should_fail_back": "replication._routing",
    "TransactionalDedupStore": "replication._dedup",
    "Verdict": "replication._dedup",
    "with_properties": "replication._message",
}


def __getattr__(name: str) -> object:
    # The same as gateway._support.lazy.lazy_exports (replication must not import
    # gateway): import the defining module, and keep the value so this runs once a name.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ANY_NAMESPACE",
    "DEFAULT_DEDUP_WINDOW",
    "RECEIVE_DEADLINES",
    "SESSION_POSITION",
    "Attempt",
    "AttemptState",
    "ConfigError",
    "DeadlineEstimator",
    "DeadlinePolicy",
    "DedupStats",
    "DedupStore",
    "DedupWindow",
    "Deduplicator",
    "DurableQueueError",
    "Failure",
    "GatewayError",
    "HedgeStep",
    "InMemoryDedupStore",
    "LatencyWindow",
    "Message",
    "MessageRejected",
    "MessageTooLarge",
    "Mode",
    "NamespaceMisconfigured",
    "NamespaceRefused",
    "NamespaceUnavailable",
    "Operation",
    "OperationTimeout",
    "OwnershipLost",
    "PropertyValue",
    "QueueCorrupt",
    "QueueFull",
    "ReorderBuffer",
    "ReplicationPolicy",
    "RetryPolicy",
    "RoleState",
    "ScopedDedupStore",
    "SendPlan",
    "SendProgress",
    "SessionGap",
    "SessionLockLost",
    "SessionOffer",
    "StoreUnavailable",
    "TransactionalDedupStore",
    "TransportError",
    "Verdict",
    "classify",
    "destination",
    "next_hedge_step",
    "parse_destination",
    "plan_send",
    "replayable",
    "retry_in_namespace",
    "scoped",
    "session_position",
    "should_fail_back",
    "with_properties",
]
