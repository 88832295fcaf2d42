"""azure-core's errors, which both SDKs raise or wrap (a credential's failure, an HTTP
error of a management call), as outcomes for the gateway."""

from __future__ import annotations

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from gateway.transports.sdk import Outcome, status_outcome

__all__ = ["core_outcome"]


def core_outcome(exc: BaseException) -> Outcome | None:
    """The outcome of an azure-core error, or None for anything else.

    An SDK's own errors derive from ``AzureError`` too: classify those first.
    """
    if isinstance(exc, ClientAuthenticationError):
        return Outcome.CREDENTIALS
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return Outcome.UNAVAILABLE
    if isinstance(exc, HttpResponseError):
        return status_outcome(exc.status_code) or Outcome.UNAVAILABLE
    if isinstance(exc, AzureError):
        return Outcome.UNAVAILABLE
    return None
