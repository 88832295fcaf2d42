"""The geo sender: routing, hedging, buffering, recovery and roles."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_dir as _lazy_dir
from gateway._support.lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from gateway.geo.sender._namespaces import UNUSABLE_LOG
    from gateway.geo.sender._recovery import ReplayReport
    from gateway.geo.sender._roles import RolesTarget
    from gateway.geo.sender._sender import AsyncGeoSender, MessageLike, SendResult

_LAZY = {
    "AsyncGeoSender": "gateway.geo.sender._sender",
    "MessageLike": "gateway.geo.sender._sender",
    "ReplayReport": "gateway.geo.sender._recovery",
    "RolesTarget": "gateway.geo.sender._roles",
    "SendResult": "gateway.geo.sender._sender",
    "UNUSABLE_LOG": "gateway.geo.sender._namespaces",
}

__getattr__ = _lazy_exports(__name__, _LAZY)
__dir__ = _lazy_dir(__name__, _LAZY)

__all__ = [
    "UNUSABLE_LOG",
    "AsyncGeoSender",
    "MessageLike",
    "ReplayReport",
    "RolesTarget",
    "SendResult",
]
