"""The geo session receiver and the session positions the sender stamps."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo.sessions._handover import RunHandler
    from gateway.geo.sessions._receiver import AsyncGeoSessionReceiver, SessionReceiverStats
    from gateway.geo.sessions._stamp import SessionStamper, needs_stamp
    from gateway.geo.sessions._sync import GeoSessionReceiver

_LAZY = {
    "AsyncGeoSessionReceiver": "gateway.geo.sessions._receiver",
    "GeoSessionReceiver": "gateway.geo.sessions._sync",
    "RunHandler": "gateway.geo.sessions._handover",
    "needs_stamp": "gateway.geo.sessions._stamp",
    "SessionReceiverStats": "gateway.geo.sessions._receiver",
    "SessionStamper": "gateway.geo.sessions._stamp",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "AsyncGeoSessionReceiver",
    "GeoSessionReceiver",
    "RunHandler",
    "SessionReceiverStats",
    "SessionStamper",
    "needs_stamp",
]
