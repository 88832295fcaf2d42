"""The partition-balanced consumer: ownership, checkpoints, balancing, processing."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway._support.lazy import lazy_exports as _lazy_exports
from gateway.consumer._balance import (
    LEAVING_SUFFIX,
    LEFT_SUFFIX,
    SUFFIXES,
    BalanceSettings,
    BalanceView,
    leaving_instances,
    live_instances,
)
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._partition import (
    CloseReason,
    PartitionContext,
    ProcessorSettings,
    StartingPosition,
)
from gateway.consumer._processor import AsyncPartitionProcessor
from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._sqlite_store import SdkCheckpointStore, SqliteCheckpointStore
from gateway.consumer._store import CheckpointStore, InMemoryCheckpointStore
from gateway.consumer._sync import PartitionProcessor, SyncPartitionContext

if _TYPE_CHECKING:
    from gateway.consumer._blob_store import BlobCheckpointStore
    from gateway.consumer._pg_store import PostgresCheckpointStore


# Imported on first use: the Blob SDK (and aiohttp behind it) is most of the start-up
# time of anything that imports the consumer, and only the blob store needs it (and
# psycopg only the PostgreSQL one).
__getattr__ = _lazy_exports(__name__, {
    "BlobCheckpointStore": "gateway.consumer._blob_store",
    "PostgresCheckpointStore": "gateway.consumer._pg_store",
})


__all__ = [
    "LEAVING_SUFFIX",
    "LEFT_SUFFIX",
    "SUFFIXES",
    "AsyncPartitionProcessor",
    "BalanceSettings",
    "BalanceView",
    "BlobCheckpointStore",
    "Checkpoint",
    "CheckpointStore",
    "CloseReason",
    "ConsumerGroupRef",
    "Heartbeat",
    "InMemoryCheckpointStore",
    "Ownership",
    "OwnershipManager",
    "PartitionContext",
    "PartitionProcessor",
    "PostgresCheckpointStore",
    "ProcessorSettings",
    "SdkCheckpointStore",
    "SqliteCheckpointStore",
    "StartingPosition",
    "SyncPartitionContext",
    "leaving_instances",
    "live_instances",
]
