"""The geo receiver: pumps, settling, done marks and the run loop."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo.receiver._receiver import AsyncGeoReceiver, ReceiverStats
    from gateway.geo.receiver._run import (
        Handler,
        HandlerThread,
        MessageInboxHandler,
        StopFlag,
        check_inbox,
        handlers_in,
    )

_LAZY = {
    "AsyncGeoReceiver": "gateway.geo.receiver._receiver",
    "check_inbox": "gateway.geo.receiver._run",
    "Handler": "gateway.geo.receiver._run",
    "HandlerThread": "gateway.geo.receiver._run",
    "handlers_in": "gateway.geo.receiver._run",
    "MessageInboxHandler": "gateway.geo.receiver._run",
    "ReceiverStats": "gateway.geo.receiver._receiver",
    "StopFlag": "gateway.geo.receiver._run",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "AsyncGeoReceiver",
    "Handler",
    "HandlerThread",
    "MessageInboxHandler",
    "ReceiverStats",
    "StopFlag",
    "check_inbox",
    "handlers_in",
]
