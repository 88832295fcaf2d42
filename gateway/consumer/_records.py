"""Ownership, checkpoint and heartbeat records of the partition-balanced consumer.

Frozen dataclasses inside the project; the Azure SDK's dict shape (the records of
``azure.eventhub.aio.CheckpointStore``) only at the edge, through ``to_sdk`` and
``from_sdk``, so that stores interoperate with ``EventHubConsumerClient``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Checkpoint", "ConsumerGroupRef", "Heartbeat", "Ownership"]


@dataclass(frozen=True, kw_only=True)
class ConsumerGroupRef:
    """Which consumer group of which entity of which namespace."""

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str = "$Default"


@dataclass(frozen=True, kw_only=True)
class Ownership:
    """Who owns one partition. ``etag`` is the store's version of the record:
    a claim succeeds only if the record still has the etag the claimer read
    (or, for a new record, if none exists yet)."""

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    owner_id: str
    last_modified_time: float | None = None
    etag: str | None = None

    @property
    def group(self) -> ConsumerGroupRef:
        return ConsumerGroupRef(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
        )

    def claimed_by(self, owner_id: str) -> Ownership:
        """The claim ``owner_id`` sends to take this partition (etag kept as read)."""
        return replace(self, owner_id=owner_id)

    def to_sdk(self) -> dict[str, Any]:
        return {
            "fully_qualified_namespace": self.fully_qualified_namespace,
            "eventhub_name": self.eventhub_name,
            "consumer_group": self.consumer_group,
            "partition_id": self.partition_id,
            "owner_id": self.owner_id,
            "last_modified_time": self.last_modified_time,
            "etag": self.etag,
        }

    @classmethod
    def from_sdk(cls, record: Mapping[str, Any]) -> Ownership:
        modified = record.get("last_modified_time")
        return cls(
            fully_qualified_namespace=str(record["fully_qualified_namespace"]),
            eventhub_name=str(record["eventhub_name"]),
            consumer_group=str(record["consumer_group"]),
            partition_id=str(record["partition_id"]),
            owner_id=str(record.get("owner_id") or ""),
            last_modified_time=None if modified is None else float(modified),
            etag=record.get("etag"),
        )


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """Where a consumer group got to in one partition of one namespace.

    ``offset`` is a string, as the Event Hubs service and SDK use it.
    """

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    partition_id: str
    offset: str | None
    sequence_number: int | None

    def to_sdk(self) -> dict[str, Any]:
        return {
            "fully_qualified_namespace": self.fully_qualified_namespace,
            "eventhub_name": self.eventhub_name,
            "consumer_group": self.consumer_group,
            "partition_id": self.partition_id,
            "offset": self.offset,
            "sequence_number": self.sequence_number,
        }

    @classmethod
    def from_sdk(cls, record: Mapping[str, Any]) -> Checkpoint:
        sequence = record.get("sequence_number")
        offset = record.get("offset")
        return cls(
            fully_qualified_namespace=str(record["fully_qualified_namespace"]),
            eventhub_name=str(record["eventhub_name"]),
            consumer_group=str(record["consumer_group"]),
            partition_id=str(record["partition_id"]),
            offset=None if offset is None else str(offset),
            sequence_number=None if sequence is None else int(sequence),
        )


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """An instance saying it is alive, so that one that owns nothing is counted.

    ``etag`` is the store's version of the record where it has one (a listed blob's);
    ``woken`` is set only on the record ``CheckpointStore.heartbeat`` returns: True
    when another instance asked this one to balance now (``CheckpointStore.wake``)
    since its previous heartbeat write.
    """

    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str
    instance_id: str
    last_modified_time: float | None = None
    etag: str | None = None
    woken: bool = False

    @property
    def group(self) -> ConsumerGroupRef:
        return ConsumerGroupRef(
            fully_qualified_namespace=self.fully_qualified_namespace,
            eventhub_name=self.eventhub_name,
            consumer_group=self.consumer_group,
        )
