"""The partition-balanced consumer: ownership, checkpoints, balancing, processing."""

from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import CheckpointStore, InMemoryCheckpointStore

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "ConsumerGroupRef",
    "Heartbeat",
    "InMemoryCheckpointStore",
    "Ownership",
]
