"""Which errors of ``azure-eventhub`` mean what to the gateway (the table is in
:mod:`gateway.transports.eventhubs`'s docstring): a stolen partition (a higher owner
level) is ``OwnershipLost``; the rest by class, AMQP condition, HTTP status code or
what the SDK's error wraps.
"""

from __future__ import annotations

from collections.abc import Sequence

from azure.core.exceptions import (
    ClientAuthenticationError,
)
from azure.eventhub.exceptions import (
    AuthenticationError,
    EventDataError,
    EventHubError,
    OperationTimeoutError,
    OwnershipLostError,
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


_NO_CREDENTIALS = (Outcome.CREDENTIALS, Outcome.REJECTED)


def _stolen(exc: BaseException) -> bool:
    error = getattr(exc, "error", None)
    return condition_outcome(error) is Outcome.OWNERSHIP_LOST or "epoch" in str(exc).lower()


def outcome(exc: BaseException) -> Outcome:
    """How the gateway takes an exception raised by ``azure-eventhub``."""
    if isinstance(exc, OwnershipLostError):
        return Outcome.OWNERSHIP_LOST
    if not isinstance(exc, EventHubError):
        return core_outcome(exc) or builtin_outcome(exc) or Outcome.UNAVAILABLE
    if _stolen(exc):
        return Outcome.OWNERSHIP_LOST
    if isinstance(exc, OperationTimeoutError):
        return Outcome.TIMEOUT
    if isinstance(exc, EventDataError):
        # A send refused with amqp:link:message-size-exceeded is an EventDataSendError.
        too_large = condition_outcome(exc.error) is Outcome.TOO_LARGE
        return Outcome.TOO_LARGE if too_large else Outcome.REJECTED
    if isinstance(exc, AuthenticationError):
        # A token refused or a credential that failed: the namespace is unusable. A
        # token refused with 404 names a hub that does not exist: refused for good.
        if find_status_code(exc) == 404:
            return Outcome.REJECTED
        refused = (status_outcome(find_status_code(exc)) in _NO_CREDENTIALS
                   or condition_outcome(exc.error) in _NO_CREDENTIALS
                   or any(isinstance(e, ClientAuthenticationError) for e in walk(exc)))
        return Outcome.CREDENTIALS if refused else Outcome.UNAVAILABLE
    found = condition_outcome(exc.error) or status_outcome(find_status_code(exc))
    if found is not None:
        return found
    # The SDK wraps what failed inside it (a credential's error, say) in EventHubError.
    for inner in list(walk(exc))[1:]:
        found = core_outcome(inner)
        if found is not None:
            return found
    return Outcome.UNAVAILABLE


def map_error(exc: BaseException, namespace: str, *, action: str = "operation",
              secrets: Sequence[str] = ()) -> GatewayError:
    """The geogateway error for an exception raised by ``azure-eventhub``.

    See the table in the module docstring. The message names ``action`` and the
    namespace and quotes the SDK's text with secrets removed.
    """
    return build_error(outcome(exc), exc, namespace=namespace, action=action, secrets=secrets)
