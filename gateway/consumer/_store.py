"""The checkpoint store seam, and its in-memory twin.

Same records and semantics as the Azure SDK's ``CheckpointStore`` (ownership claims
conditional on etags, checkpoints per partition), plus what geogateway needs on
top: heartbeats (instances that own nothing are counted) and fenced checkpoint
writes (a stale owner cannot move a checkpoint).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import TracebackType

from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from replication import OwnershipLost

__all__ = ["CheckpointStore", "InMemoryCheckpointStore"]


class CheckpointStore:
    """Ownership, checkpoints and heartbeats of consumer groups (async).

    Implementations map their own errors onto the project's error tree; an
    unexpected store error is raised, never taken as a won or lost claim.
    """

    async def __aenter__(self) -> CheckpointStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        """Every ownership record of the group, with etags."""
        raise NotImplementedError()  # pragma: no cover

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        """Try each claim; return those won, with their new etag and time.

        A claim wins when the record's etag still equals the claim's ``etag`` (or,
        with ``etag=None``, when there is no record yet). Lost claims are left out.
        """
        raise NotImplementedError()  # pragma: no cover

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        """Write a checkpoint, fenced: only the partition's current owner may.

        Raises:
            OwnershipLost: ``owner_id`` does not own the partition (any more).
        """
        raise NotImplementedError()  # pragma: no cover

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        """Every checkpoint of the group."""
        raise NotImplementedError()  # pragma: no cover

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        """Record that an instance is alive; return the record as stored (with time).

        On a store that ``supports_wake``, the returned record's ``woken`` says
        whether a wake landed on the record since this instance's previous write
        (which this write clears).
        """
        raise NotImplementedError()  # pragma: no cover

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        """Every instance heartbeat of the group (stale ones included)."""
        raise NotImplementedError()  # pragma: no cover

    supports_wake: bool = False
    """True when :meth:`wake` reaches the instances (at their next heartbeat write).
    Balancing over a store without it still converges, with more partition moves."""

    async def wake(self, heartbeats: Sequence[Heartbeat]) -> None:
        """Ask the instances of these heartbeat records (as listed) to balance now.

        Each one's next :meth:`heartbeat` returns ``woken=True``. It changes neither
        the record's time (nobody looks more alive for being woken) nor, where the
        store has etags, a record written since it was listed: that instance beat
        since, and is asked again if it still has to be. Does nothing by default.
        """
        return None

    async def aclose(self) -> None:
        """Release connections and files. Safe to call twice."""


class InMemoryCheckpointStore(CheckpointStore):
    """A store in a dict on the instance: for unit tests and virtual-time benchmarks.

    Args:
        clock: where ``last_modified_time`` comes from (inject a virtual clock).
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._ownership: dict[tuple[ConsumerGroupRef, str], Ownership] = {}
        self._checkpoints: dict[tuple[ConsumerGroupRef, str], Checkpoint] = {}
        self._heartbeats: dict[tuple[ConsumerGroupRef, str], Heartbeat] = {}
        self._wakes: set[tuple[ConsumerGroupRef, str]] = set()

    supports_wake = True

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        return [o for (g, _), o in self._ownership.items() if g == group]

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        won = []
        for claim in claims:
            key = (claim.group, claim.partition_id)
            current = self._ownership.get(key)
            if (current.etag if current is not None else None) != claim.etag:
                continue
            record = replace(claim, etag=uuid.uuid4().hex, last_modified_time=self._clock())
            self._ownership[key] = record
            won.append(record)
        return won

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        group = ConsumerGroupRef(
            fully_qualified_namespace=checkpoint.fully_qualified_namespace,
            eventhub_name=checkpoint.eventhub_name,
            consumer_group=checkpoint.consumer_group,
        )
        current = self._ownership.get((group, checkpoint.partition_id))
        if current is None or current.owner_id != owner_id:
            raise OwnershipLost(
                f"{owner_id} does not own partition {checkpoint.partition_id} of "
                f"{checkpoint.eventhub_name}; checkpoint not written"
            )
        self._checkpoints[(group, checkpoint.partition_id)] = checkpoint

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        return [c for (g, _), c in self._checkpoints.items() if g == group]

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        record = replace(heartbeat, last_modified_time=self._clock(), etag=None, woken=False)
        key = (heartbeat.group, heartbeat.instance_id)
        self._heartbeats[key] = record
        if key in self._wakes:
            self._wakes.discard(key)
            return replace(record, woken=True)
        return record

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        return [h for (g, _), h in self._heartbeats.items() if g == group]

    async def wake(self, heartbeats: Sequence[Heartbeat]) -> None:
        for hb in heartbeats:
            if (hb.group, hb.instance_id) in self._heartbeats:
                self._wakes.add((hb.group, hb.instance_id))
