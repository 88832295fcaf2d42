"""The Azure Event Hubs transport (azure-eventhub)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.transports.eventhubs._client import EventHubsOptions
    from gateway.transports.eventhubs._transport import EventHubsTransport

_LAZY = {
    "EventHubsOptions": "gateway.transports.eventhubs._client",
    "EventHubsTransport": "gateway.transports.eventhubs._transport",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "EventHubsOptions",
    "EventHubsTransport",
]
