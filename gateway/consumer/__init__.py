"""The partition-balanced consumer: ownership, checkpoints, balancing, processing."""

from gateway.consumer._balance import BalanceSettings
from gateway.consumer._blob_store import BlobCheckpointStore
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
