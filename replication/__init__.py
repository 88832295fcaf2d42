"""Pure replication policy: no I/O of its own and no azure import.

Active and passive replication, role state, failure classification, per-operation
deadlines and hedged sends, the ``MessageId`` de-duplicator, the error tree and the
message record.
"""

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
from replication._errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    MessageTooLarge,
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
from replication._hedging import Attempt, AttemptState, HedgeStep, next_hedge_step
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
