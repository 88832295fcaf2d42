"""The one error tree of geogateway.

Every package raises from this tree; SDK and sqlite3 errors are mapped onto it at
the boundary where they occur (``raise Mapped(...) from exc``)::

    GatewayError
    ├── TransportError(namespace)      transient: retry, then fail over or buffer
    │   ├── NamespaceUnavailable       the namespace cannot be reached or is down
    │   │   └── NamespaceRefused       it refused at once (connection refused, taken down):
    │   │                              final for this send, fail over without retrying it
    │   │       └── NamespaceMisconfigured  it cannot be used as configured (its key refused,
    │   │                              no rights, a host name that does not resolve)
    │   └── OperationTimeout           the outcome is unknown: the message may have arrived
    ├── MessageRejected                permanent: too large, unauthorized, no such entity
    │   ├── MessageTooLarge            a message (or a batch) over the namespace's size limit
    │   └── SessionLockLost            the session's lock expired or another receiver took it
    ├── DurableQueueError
    │   ├── QueueFull                  the size cap (messages or bytes) is reached
    │   └── QueueCorrupt               the queue file is torn or not a queue
    ├── OwnershipLost                  another instance owns the partition now
    ├── StoreUnavailable               a shared store (PostgreSQL) cannot be reached now
    └── ConfigError                    a bad option, value or file

The tree lives in ``replication`` (pure, no I/O) because ``durable_queue`` and
``replication`` must not import ``gateway``; ``gateway`` re-exports it.
"""

from __future__ import annotations

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


class GatewayError(Exception):
    """Base class of every error geogateway raises."""


class TransportError(GatewayError):
    """A transient failure talking to one namespace: retry, then fail over or buffer.

    Args:
        message: what went wrong, in one line, with no secrets in it.
        namespace: the name of the namespace (``"primary"``, ``"secondary"``, ...).
    """

    def __init__(self, message: str, *, namespace: str) -> None:
        super().__init__(message)
        self.namespace = namespace

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments do not survive pickling by default; errors cross
        # process boundaries in drills, so keep them picklable.
        return (_rebuild_transport_error, (type(self), str(self), self.namespace))


def _rebuild_transport_error(
    cls: type[TransportError], message: str, namespace: str
) -> TransportError:
    return cls(message, namespace=namespace)


class NamespaceUnavailable(TransportError):
    """The namespace is down or cannot be reached; nothing was sent."""


class NamespaceRefused(NamespaceUnavailable):
    """The namespace refused the operation at once: nothing was sent, and it said so.

    A connection refused, or a namespace that is taken down. Unlike a dropped
    connection (which its immediate retry may fix), a refusal is final for this send:
    the sender fails over at once instead of retrying the namespace that said no.
    """


class NamespaceMisconfigured(NamespaceRefused):
    """The namespace cannot be used as configured: it refused the credentials (a wrong
    key, a policy or role without the rights), or its host name does not resolve.

    The namespace is unusable, not the message: a sender fails over (passive) or
    buffers that namespace's copy (active), as for an outage, and says once, at ERROR,
    what to check. The message says what to check and never holds the key.
    """


class OperationTimeout(TransportError):
    """The operation did not finish in time: its outcome is unknown.

    A send that raises this may still have landed; replaying it can deliver a
    duplicate, which the receive side removes by ``MessageId``.
    """


class MessageRejected(GatewayError):
    """The namespace refused the message for good (too large, unauthorized, no such entity).

    Never causes failover or buffering: sending it elsewhere would fail the same way.
    """


class MessageTooLarge(MessageRejected):
    """The namespace refused a message, or a batch of them, as over its size limit.

    A geo sender splits a batch refused for size and sends the halves, so it raises
    this only for a single message too large. ``sent`` messages of the call, counted
    from the first, were accepted before the refusal; the rest were not.

    Args:
        message: what was refused and why, in one line.
        sent: how many messages, from the first, were accepted before the refusal.
        message_id: the message too large on its own, when that is known (it is
            never sent, whatever batch it is in); ``None`` when a batch as a whole
            was refused.
    """

    def __init__(self, message: str, *, sent: int = 0, message_id: str | None = None) -> None:
        super().__init__(message)
        self.sent = sent
        self.message_id = message_id

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_too_large, (str(self), self.sent, self.message_id))


def _rebuild_too_large(message: str, sent: int, message_id: str | None) -> MessageTooLarge:
    return MessageTooLarge(message, sent=sent, message_id=message_id)


class SessionLockLost(MessageRejected):
    """The lock on a session is gone: it expired, or another receiver took the session.

    Permanent for that lock (renewing or settling through it cannot succeed); the
    session's unsettled messages are delivered again to whoever locks it next.
    """


class DurableQueueError(GatewayError):
    """Base class of the durable queue's errors."""


class QueueFull(DurableQueueError):
    """The durable queue is at its size cap; the message was not stored."""


class QueueCorrupt(DurableQueueError):
    """The durable queue file is damaged or is not a geogateway queue."""


class OwnershipLost(GatewayError):
    """Another instance owns the partition now; stop reading it."""


class StoreUnavailable(GatewayError):
    """A shared store (the PostgreSQL de-duplication, inbox, outbox, roles or checkpoint
    store) cannot be reached now: transient; nothing was written. Receivers stop
    settling (no copy is completed without its done mark) and go on once it is back."""


class ConfigError(GatewayError):
    """A configuration value, option or file is invalid."""
