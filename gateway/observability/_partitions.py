"""Who owns which partition, lease ages and checkpoint lag, read from a checkpoint store.

One consumer group of one entity, per namespace: the ownership records, checkpoints
and heartbeats the partition-balanced consumers keep in their store, judged as the
balancing function judges them (an owner is alive while it heartbeats), and, for the
embedded local namespaces, the last sequence number of each partition, so that the
lag of each checkpoint (events after it) is known. It only reads: the local
namespaces' files are never created. ``geogateway consumer status``, ``geogateway
status`` and the ``/status`` page show it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.consumer import (
    LEAVING_SUFFIX,
    LEFT_SUFFIX,
    SUFFIXES,
    BalanceSettings,
    BalanceView,
    Checkpoint,
    CheckpointStore,
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
    leaving_instances,
    live_instances,
)
from gateway.transports.local import LocalNamespace, PartitionInfo
from replication import ConfigError, MessageRejected, NamespaceUnavailable

__all__ = ["ConsumerNamespaceStatus", "LocalPartitions", "PartitionStatus", "consumer_status",
           "local_partitions", "namespace_report", "read_store"]


@dataclass
class PartitionStatus:
    """One partition of one namespace: its owner, lease age, checkpoint and lag.

    ``lag`` is the number of events after the checkpoint (all of them without one);
    ``None`` when the namespace's last sequence number is unknown (not a local
    namespace, or it is down).
    """

    namespace: str
    partition: str
    owner: str | None = None
    released: bool = False
    lease_age: float | None = None
    owner_alive: bool | None = None
    checkpoint_sequence_number: int | None = None
    checkpoint_offset: str | None = None
    last_sequence_number: int | None = None
    empty: bool | None = None
    lag: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The partition as JSON-ready data."""
        return {
            "namespace": self.namespace,
            "partition": self.partition,
            "owner": self.owner,
            "released": self.released,
            "lease_age_seconds": None if self.lease_age is None else round(self.lease_age, 3),
            "owner_alive": self.owner_alive,
            "checkpoint_sequence_number": self.checkpoint_sequence_number,
            "checkpoint_offset": self.checkpoint_offset,
            "last_sequence_number": self.last_sequence_number,
            "lag": self.lag,
        }


@dataclass
class ConsumerNamespaceStatus:
    """The consumer group's state in one namespace.

    ``state`` is ``"up"``, ``"down"`` or ``"unknown"`` (no local namespace to ask);
    ``notes`` say what could not be known and why.
    """

    namespace: str
    state: str
    notes: list[str] = field(default_factory=list)
    partitions: list[PartitionStatus] = field(default_factory=list)
    instances: list[dict[str, Any]] = field(default_factory=list)

    @property
    def alive(self) -> list[dict[str, Any]]:
        """The instances that heartbeat."""
        return [i for i in self.instances if i["alive"]]

    @property
    def total_lag(self) -> int | None:
        """The lag summed over the partitions; ``None`` when one is unknown."""
        lags = [p.lag for p in self.partitions]
        return None if not lags or None in lags else sum(x for x in lags if x is not None)

    def as_json(self) -> dict[str, Any]:
        """The namespace's consumer state as JSON-ready data."""
        return {
            "namespace": self.namespace,
            "state": self.state,
            "notes": self.notes,
            "instances_alive": len(self.alive),
            "instances": self.instances,
            "unowned": sum(1 for p in self.partitions if not p.owner_alive),
            "total_lag": self.total_lag,
            "partitions": [p.as_json() for p in self.partitions],
        }


def _pid_key(pid: str) -> tuple[int, int | str]:
    return (0, int(pid)) if pid.isdigit() else (1, pid)


LocalPartitions = tuple[str, dict[str, PartitionInfo] | None, str | None]
"""(state, partition info by id or None when unknown, note) of one local namespace."""


def local_partitions(name: str, entity: str, data_dir: str | os.PathLike[str] | None
                     ) -> LocalPartitions:
    """What the local namespace ``name`` says of the entity's partitions (never creating
    its file): ``(state, {partition id: info} or None, note or None)``."""
    try:
        ns = LocalNamespace(name, data_dir=data_dir)
    except ConfigError:
        return "unknown", None, f"{name!r} is not a local namespace name: lag unknown"
    try:
        if not os.path.exists(ns.path):
            return "unknown", None, f"no local namespace {name} at {ns.path}: lag unknown"
        if not ns.status().up:
            return "down", None, (f"namespace {name} is down: rows from the store, lag "
                                  "unknown")
        try:
            infos = ns.partition_info(entity)
        except MessageRejected:
            return "up", None, f"no partitioned entity {entity!r} in {name}: lag unknown"
        except NamespaceUnavailable as exc:
            return "down", None, f"{exc}; lag unknown"
        return "up", {i.partition_id: i for i in infos}, None
    finally:
        ns.close()


def _instances(
    ownerships: list[Ownership], heartbeats: list[Heartbeat], alive: set[str],
    leaving: set[str], now: float,
) -> list[dict[str, Any]]:
    beats = {h.instance_id: h for h in heartbeats if not h.instance_id.endswith(SUFFIXES)}
    left = {h.instance_id[: -len(LEFT_SUFFIX)]: h for h in heartbeats
            if h.instance_id.endswith(LEFT_SUFFIX)}
    for h in heartbeats:  # a leaving instance heartbeats under <id>#leaving
        if h.instance_id.endswith(LEAVING_SUFFIX):
            x = h.instance_id[: -len(LEAVING_SUFFIX)]
            if x in leaving:
                beats[x] = h
    owned: dict[str, int] = {}
    for o in ownerships:
        if o.owner_id:
            owned[o.owner_id] = owned.get(o.owner_id, 0) + 1
    report = []
    for instance in sorted(set(beats) | set(owned) | set(left)):
        beat = beats.get(instance)
        at = beat.last_modified_time if beat is not None else None
        gone = left.get(instance)
        report.append({
            "instance_id": instance,
            "alive": instance in alive,
            "heartbeat_age_seconds": None if at is None else round(max(0.0, now - at), 3),
            "leaving": instance in leaving,
            "left": gone is not None and (at is None or (gone.last_modified_time or 0) >= at),
            "partitions": owned.get(instance, 0),
        })
    return report


def namespace_report(
    name: str, entity: str, consumer_group: str, ownerships: list[Ownership],
    checkpoints: list[Checkpoint], heartbeats: list[Heartbeat], local: LocalPartitions,
    settings: BalanceSettings, now: float,
) -> ConsumerNamespaceStatus:
    """The consumer group's state in namespace ``name`` from the store's records and
    what the namespace says of its partitions (:func:`local_partitions`)."""
    state, infos, note = local
    report = ConsumerNamespaceStatus(namespace=name, state=state, notes=[note] if note else [])
    group = ConsumerGroupRef(fully_qualified_namespace=name, eventhub_name=entity,
                             consumer_group=consumer_group)
    view = BalanceView(group=group, partition_ids=tuple(infos or ()),
                       ownerships=tuple(ownerships), heartbeats=tuple(heartbeats))
    # "" is never an owner (it is a released record), so it stands in for "me".
    leaving = set(leaving_instances(view, now=now, settings=settings))
    alive = (set(live_instances(view, me="", now=now, settings=settings)) | leaving) - {""}
    with_heartbeat = {h.instance_id for h in heartbeats}
    records = {o.partition_id: o for o in ownerships}
    marks = {c.partition_id: c for c in checkpoints}
    for pid in sorted(set(records) | set(marks) | set(infos or ()), key=_pid_key):
        row = PartitionStatus(namespace=name, partition=pid)
        record = records.get(pid)
        if record is not None:
            row.owner = record.owner_id or None
            row.released = not record.owner_id
            if record.last_modified_time is not None:
                row.lease_age = max(0.0, now - record.last_modified_time)
            if record.owner_id:
                # As balancing sees it: an owner without heartbeats lives by the record's age.
                row.owner_alive = record.owner_id in alive and (
                    record.owner_id in with_heartbeat
                    or (row.lease_age is not None and row.lease_age <= settings.ownership_expiry)
                )
        mark = marks.get(pid)
        if mark is not None:
            row.checkpoint_sequence_number = mark.sequence_number
            row.checkpoint_offset = mark.offset
        info = (infos or {}).get(pid)
        if info is not None:
            row.last_sequence_number = info.last_sequence_number
            row.empty = info.last_sequence_number is None
            next_sequence = 0 if info.last_sequence_number is None else (
                info.last_sequence_number + 1)
            done = 0 if row.checkpoint_sequence_number is None else (
                row.checkpoint_sequence_number + 1)
            row.lag = next_sequence - done
        report.partitions.append(row)
    if infos is not None:
        extra = sorted((set(records) | set(marks)) - set(infos), key=_pid_key)
        if extra:
            report.notes.append(f"the store has partitions {', '.join(extra)} that {name} "
                                f"does not have")
    if not ownerships and not checkpoints and not heartbeats:
        report.notes.append(f"the store has nothing for consumer group "
                            f"{group.consumer_group!r} of {entity!r} on {name}")
    report.instances = _instances(ownerships, heartbeats, alive, leaving, now)
    return report


async def read_store(
    store: CheckpointStore, names: Iterable[str], entity: str, consumer_group: str
) -> dict[str, tuple[list[Ownership], list[Checkpoint], list[Heartbeat]]]:
    """The ownerships, checkpoints and heartbeats of the group in each namespace."""
    found = {}
    for name in names:
        group = ConsumerGroupRef(fully_qualified_namespace=name, eventhub_name=entity,
                                 consumer_group=consumer_group)
        found[name] = (await store.list_ownership(group),
                       await store.list_checkpoints(group),
                       await store.list_heartbeats(group))
    return found


async def consumer_status(
    store: CheckpointStore, names: Iterable[str], *, entity: str,
    consumer_group: str = "$Default", data_dir: str | os.PathLike[str] | Path | None = None,
    now: float, settings: BalanceSettings | None = None,
) -> list[ConsumerNamespaceStatus]:
    """The consumer group's state in each namespace of ``names`` (an open ``store``).

    Args:
        store: the checkpoint store, open (not closed here).
        names: the namespaces' names, as the consumers record them.
        entity: the partitioned entity (event hub).
        consumer_group: the consumer group.
        data_dir: where the local namespaces live, for the lag.
        now: the current time (seconds since the epoch).
        settings: the balancing settings that say when an owner is alive.

    Raises:
        GatewayError: the store could not be read.
    """
    settings = settings or BalanceSettings()
    names = list(names)
    found = await read_store(store, names, entity, consumer_group)
    return [namespace_report(name, entity, consumer_group, *found[name],
                             local_partitions(name, entity, data_dir), settings, now)
            for name in names]
