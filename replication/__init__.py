"""Pure replication policy: no I/O of its own and no azure import.

Active and passive replication, role state, failure classification, the
``MessageId`` de-duplicator, the error tree and the message record.
"""

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
from replication._errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    TransportError,
)
from replication._message import Message, PropertyValue
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
    should_fail_back,
)

__all__ = [
    "ANY_NAMESPACE",
    "DEFAULT_DEDUP_WINDOW",
    "ConfigError",
    "DedupStats",
    "DedupStore",
    "DedupWindow",
    "Deduplicator",
    "DurableQueueError",
    "Failure",
    "GatewayError",
    "InMemoryDedupStore",
    "Message",
    "MessageRejected",
    "MessageTooLarge",
    "Mode",
    "NamespaceUnavailable",
    "OperationTimeout",
    "OwnershipLost",
    "PropertyValue",
    "QueueCorrupt",
    "QueueFull",
    "ReplicationPolicy",
    "RetryPolicy",
    "RoleState",
    "SendPlan",
    "TransactionalDedupStore",
    "TransportError",
    "Verdict",
    "classify",
    "destination",
    "parse_destination",
    "plan_send",
    "replayable",
    "should_fail_back",
]
