"""Pure replication policy: no I/O of its own and no azure import.

Active and passive replication, role state, failure classification, the
``MessageId`` de-duplicator, the error tree and the message record.
"""

from replication._errors import (
    ConfigError,
    DurableQueueError,
    GatewayError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    OwnershipLost,
    QueueCorrupt,
    QueueFull,
    TransportError,
)
from replication._message import Message, PropertyValue

__all__ = [
    "ConfigError",
    "DurableQueueError",
    "GatewayError",
    "Message",
    "MessageRejected",
    "NamespaceUnavailable",
    "OperationTimeout",
    "OwnershipLost",
    "PropertyValue",
    "QueueCorrupt",
    "QueueFull",
    "TransportError",
]
