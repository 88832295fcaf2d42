"""The AMQP error a client gets for what the geo sender or receiver raised.

The conditions are the service's, so that each SDK raises what it raises against
Azure: a message too large is ``amqp:link:message-size-exceeded``
(``MessageSizeExceededError`` in azure-servicebus), a missing entity
``amqp:not-found``, a refused key ``amqp:unauthorized-access``; an outage the gateway
could not ride out (both namespaces down and no durable queue, a full durable queue)
is ``com.microsoft:server-busy``, which the SDKs retry; an unknown outcome is
``com.microsoft:timeout``. The description is the error's text with secrets redacted.
"""

from __future__ import annotations

from gateway._support.secrets import redact
from gateway.amqp import Error, Rejected, Symbol
from replication import (
    GatewayError,
    MessageRejected,
    MessageTooLarge,
    NamespaceUnavailable,
    OperationTimeout,
    QueueFull,
)

__all__ = ["condition", "describe", "rejected"]

MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
NOT_FOUND = "amqp:not-found"
UNAUTHORIZED = "amqp:unauthorized-access"
SERVER_BUSY = "com.microsoft:server-busy"
TIMEOUT = "com.microsoft:timeout"
NOT_ALLOWED = "amqp:not-allowed"
INTERNAL = "amqp:internal-error"

# What a namespace's refusal says, as the transports word it (their SDKs' messages).
_NOT_FOUND_WORDS = ("not found", "could not be found", "no such", "does not exist",
                    "no subscription", "no queue")
_UNAUTHORIZED_WORDS = ("unauthori", "authenticat", "signature", "permission")


def condition(error: GatewayError) -> str:
    """The AMQP error condition a client gets for ``error``."""
    if isinstance(error, MessageTooLarge):
        return MESSAGE_SIZE_EXCEEDED
    if isinstance(error, MessageRejected):
        text = str(error).lower()
        if any(w in text for w in _NOT_FOUND_WORDS):
            return NOT_FOUND
        if any(w in text for w in _UNAUTHORIZED_WORDS):
            return UNAUTHORIZED
        return NOT_ALLOWED
    if isinstance(error, OperationTimeout):
        return TIMEOUT
    if isinstance(error, (NamespaceUnavailable, QueueFull)):
        return SERVER_BUSY
    return INTERNAL


def describe(error: BaseException) -> str:
    """What a client (and the log) is told of ``error``: its text with any secret a
    namespace's error might quote (a key, a signature, a password) redacted."""
    return redact(str(error))


def rejected(cond: str, description: str) -> Rejected:
    """The ``rejected`` outcome with an error."""
    return Rejected(error=Error(condition=Symbol(cond), description=description))
