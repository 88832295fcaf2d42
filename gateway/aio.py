"""The async API: ``AsyncGeoSender`` and ``AsyncGeoReceiver`` (close with ``aclose()``)."""

from gateway._receiver import AsyncGeoReceiver
from gateway._sender import AsyncGeoSender

__all__ = ["AsyncGeoReceiver", "AsyncGeoSender"]
