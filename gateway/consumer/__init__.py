"""The partition-balanced consumer: ownership, checkpoints, balancing, processing."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from gateway.consumer._balance import BalanceSettings
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._processor import (
    AsyncPartitionProcessor,
    CloseReason,
    PartitionContext,
    ProcessorSettings,
)
from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._sqlite_store import SdkCheckpointStore, SqliteCheckpointStore
from gateway.consumer._store import CheckpointStore, InMemoryCheckpointStore
from gateway.consumer._sync import PartitionProcessor, SyncPartitionContext

if _TYPE_CHECKING:
    from gateway.consumer._blob_store import BlobCheckpointStore


def __getattr__(name: str) -> object:
    # Imported on first use: the Blob SDK (and aiohttp behind it) is most of the start-up
    # time of anything that imports the consumer, and only the blob store needs it.
    if name == "BlobCheckpointStore":
        from gateway.consumer._blob_store import BlobCheckpointStore

        return BlobCheckpointStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncPartitionProcessor",
    "BalanceSettings",
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
    "ProcessorSettings",
    "SdkCheckpointStore",
    "SqliteCheckpointStore",
    "SyncPartitionContext",
]
