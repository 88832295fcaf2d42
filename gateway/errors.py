"""The error tree, re-exported from :mod:`replication` (where it lives so that the
pure packages can raise it without importing ``gateway``). See its docstring for
the tree."""

from replication import (
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

__all__ = [
    "ConfigError",
    "DurableQueueError",
    "GatewayError",
    "MessageRejected",
    "MessageTooLarge",
    "NamespaceMisconfigured",
    "NamespaceRefused",
    "NamespaceUnavailable",
    "OperationTimeout",
    "OwnershipLost",
    "QueueCorrupt",
    "QueueFull",
    "SessionLockLost",
    "StoreUnavailable",
    "TransportError",
]
