"""The Azure Service Bus transport (azure-servicebus)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports.servicebus._client import ServiceBusOptions
    from gateway.transports.servicebus._transport import ServiceBusTransport

_LAZY = {
    "ServiceBusOptions": "gateway.transports.servicebus._client",
    "ServiceBusTransport": "gateway.transports.servicebus._transport",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "ServiceBusOptions",
    "ServiceBusTransport",
]
