"""The partition-balanced consumer: ownership, checkpoints, balancing, processing."""

from gateway.consumer._blob_store import BlobCheckpointStore
from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._sqlite_store import SdkCheckpointStore, SqliteCheckpointStore
from gateway.consumer._store import CheckpointStore, InMemoryCheckpointStore

__all__ = [
    "BlobCheckpointStore",
    "Checkpoint",
    "CheckpointStore",
    "ConsumerGroupRef",
    "Heartbeat",
    "InMemoryCheckpointStore",
    "Ownership",
    "SdkCheckpointStore",
    "SqliteCheckpointStore",
]
