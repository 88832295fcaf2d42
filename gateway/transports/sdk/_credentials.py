"""The credentials the SDK transports sign in with, checked before a client is built.

Both SDKs' async clients take an async token credential (azure-identity's ``.aio``
ones), a named key or a shared access signature. A sync ``TokenCredential`` looks
like an async one until the SDK awaits its ``get_token`` on the first connection;
it is refused here, when the namespace is configured, with the fix in one line.
"""

from __future__ import annotations

import inspect
from typing import cast

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.credentials_async import AsyncTokenCredential

from replication import ConfigError

__all__ = ["Credential", "check_credential"]

#: What the Service Bus and Event Hubs transports sign in with.
Credential = AsyncTokenCredential | AzureSasCredential | AzureNamedKeyCredential


def check_credential(value: object) -> Credential:
    """Return ``value`` if the async SDK clients can sign in with it.

    Raises:
        ConfigError: ``value`` is a sync token credential (the message names the
            ``.aio`` one to pass), or no azure-core credential at all. The message
            names the type only, never what the object holds.
    """
    if isinstance(value, (AzureNamedKeyCredential, AzureSasCredential)):
        return value
    kind = type(value).__name__
    get_token = getattr(value, "get_token", None)
    if get_token is not None and not isinstance(value, (str, bytes)):
        if inspect.iscoroutinefunction(get_token):
            return cast(AsyncTokenCredential, value)  # the Protocol's shape, checked above
        raise ConfigError(f"credential: {kind} is a sync TokenCredential; pass the async one "
                          f"({_async_twin(value)})")
    raise ConfigError(f"credential must be an azure-core credential (an async token "
                      f"credential from azure.identity.aio, AzureNamedKeyCredential or "
                      f"AzureSasCredential), not {kind}")


def _async_twin(value: object) -> str:
    kind = type(value).__name__
    if type(value).__module__.startswith("azure.identity"):
        return f"from azure.identity.aio import {kind}"
    return "whose get_token is a coroutine function, such as azure.identity.aio's"
