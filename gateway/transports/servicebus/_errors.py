"""Which errors of ``azure-servicebus`` mean what to the gateway (the table is in
:mod:`gateway.transports.servicebus`'s docstring): most by class; an authentication
error or a plain ``ServiceBusError`` by what it wraps, its AMQP condition or its HTTP
status code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from azure.core.exceptions import (
    ClientAuthenticationError,
)
from azure.servicebus.exceptions import (
    AutoLockRenewFailed,
    AutoLockRenewTimeout,
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityAlreadyExistsError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)

from gateway.transports._core_errors import core_outcome
from gateway.transports.sdk import (
    Outcome,
    build_error,
    builtin_outcome,
    condition_outcome,
    find_status_code,
    status_outcome,
    walk,
)
from replication import GatewayError

__all__ = ["map_error", "outcome"]

_CONDITION_TEXT = re.compile(r"(?i)error condition:\s*([\w.:-]+)")

# Most specific first; ServiceBusAuthenticationError and plain ServiceBusError need a look
# at what they wrap (see outcome()).
_CLASSES: tuple[tuple[type[BaseException], Outcome], ...] = (
    (MessageSizeExceededError, Outcome.TOO_LARGE),
    (MessageLockLostError, Outcome.LOCK_LOST),
    (SessionLockLostError, Outcome.SESSION_LOCK_LOST),
    (MessageNotFoundError, Outcome.LOCK_LOST),
    (MessageAlreadySettled, Outcome.LOCK_LOST),
    (AutoLockRenewFailed, Outcome.LOCK_LOST),
    (AutoLockRenewTimeout, Outcome.LOCK_LOST),
    (MessagingEntityNotFoundError, Outcome.REJECTED),
    (MessagingEntityAlreadyExistsError, Outcome.REJECTED),
    (SessionCannotBeLockedError, Outcome.REJECTED),
    (ServiceBusAuthorizationError, Outcome.CREDENTIALS),
    (OperationTimeoutError, Outcome.TIMEOUT),
    (ServiceBusQuotaExceededError, Outcome.UNAVAILABLE),
    (MessagingEntityDisabledError, Outcome.UNAVAILABLE),
    (ServiceBusServerBusyError, Outcome.UNAVAILABLE),
    (ServiceBusCommunicationError, Outcome.UNAVAILABLE),
    (ServiceBusConnectionError, Outcome.UNAVAILABLE),
)


_NO_CREDENTIALS = (Outcome.CREDENTIALS, Outcome.REJECTED)


def _condition(exc: BaseException) -> Outcome | None:
    for item in walk(exc):
        found = condition_outcome(getattr(item, "condition", None))
        if found is not None:
            return found
    match = _CONDITION_TEXT.search(str(exc))
    return condition_outcome(match.group(1).rstrip(".")) if match else None


def _core_outcome(exc: BaseException) -> Outcome | None:
    # Called only on what is not a ServiceBusError: azure-core's errors and built-ins.
    return core_outcome(exc) or builtin_outcome(exc)


def outcome(exc: BaseException) -> Outcome:
    """How the gateway takes an exception raised by ``azure-servicebus``."""
    for cls, outcome in _CLASSES:
        if isinstance(exc, cls):
            return outcome
    if isinstance(exc, ServiceBusAuthenticationError):
        # A token refused (its status or condition) or a credential that failed: the
        # namespace is unusable with these credentials, whatever the message. A token
        # refused with 404 names an entity that does not exist: refused for good.
        if find_status_code(exc) == 404:
            return Outcome.REJECTED
        refused = status_outcome(find_status_code(exc)) in _NO_CREDENTIALS
        if refused or _condition(exc) in _NO_CREDENTIALS or any(
                isinstance(e, ClientAuthenticationError) for e in walk(exc)):
            return Outcome.CREDENTIALS
        return Outcome.UNAVAILABLE
    if isinstance(exc, ServiceBusError):
        # A generic ServiceBusError: what it wraps, its AMQP condition, its status code.
        for inner in list(walk(exc))[1:]:
            if not isinstance(inner, ServiceBusError):
                found = _core_outcome(inner)
                if found is not None:
                    return found
        return (_condition(exc) or status_outcome(find_status_code(exc))
                or Outcome.UNAVAILABLE)
    return _core_outcome(exc) or Outcome.UNAVAILABLE


def map_error(exc: BaseException, namespace: str, *, action: str = "operation",
              secrets: Sequence[str] = ()) -> GatewayError:
    """The geogateway error for an exception raised by ``azure-servicebus``.

    See the table in the module docstring. The message names ``action`` and the
    namespace and quotes the SDK's text with secrets removed.
    """
    return build_error(outcome(exc), exc, namespace=namespace, action=action, secrets=secrets)
