"""The async API: ``AsyncGeoSender``, ``AsyncGeoReceiver`` and
``AsyncGeoPartitionReceiver`` (close with ``aclose()``)."""

from gateway._geo_partitions import AsyncGeoPartitionReceiver
from gateway._receiver import AsyncGeoReceiver
from gateway._sender import AsyncGeoSender

__all__ = ["AsyncGeoPartitionReceiver", "AsyncGeoReceiver", "AsyncGeoSender"]
