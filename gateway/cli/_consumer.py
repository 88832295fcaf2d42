"""``geogateway consumer status``: who owns which partition, lease ages, checkpoint lag.

Reads one consumer group of one entity from a checkpoint store (a SQLite file, a
PostgreSQL database or an Azure Blob Storage container), per namespace, and the last
sequence number of each partition from the embedded local namespaces, to show how
far behind each checkpoint is. It only reads: a missing store file is an error, never
created, and a PostgreSQL store is read in READ ONLY transactions, its tables never
created.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gateway.cli._common import data_dir_option, fail, out, print_json, print_table, run
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
from gateway.stores import is_dsn
from gateway.transports.local import LocalNamespace, PartitionInfo
from replication import ConfigError, MessageRejected, NamespaceUnavailable

#: Blob retries for an interactive command: the storage SDK's defaults keep an
#: unreachable account silent for more than a minute.
_BLOB_CLIENT_OPTIONS: dict[str, Any] = {
    "retry_total": 2, "initial_backoff": 1, "increment_base": 2, "connection_timeout": 5,
}


def register(group: click.Group) -> None:
    group.add_command(consumer)


@click.group()
def consumer() -> None:
    """Inspect the partition-balanced consumers of an entity."""


# -- the report ---------------------------------------------------------------------------


@dataclass
class _Partition:
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
class _Namespace:
    namespace: str
    state: str  # "up", "down" or "unknown" (no local namespace to ask)
    notes: list[str] = field(default_factory=list)
    partitions: list[_Partition] = field(default_factory=list)
    instances: list[dict[str, Any]] = field(default_factory=list)

    @property
    def alive(self) -> list[dict[str, Any]]:
        return [i for i in self.instances if i["alive"]]

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions]
        return None if not lags or None in lags else sum(x for x in lags if x is not None)

    def as_json(self) -> dict[str, Any]:
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


#: (state, partition info by id or None when unknown, note) of one local namespace.
_Local = tuple[str, dict[str, PartitionInfo] | None, str | None]


def _local_partitions(name: str, entity: str, data_dir: Path | None) -> _Local:
    """What the local namespace says about the entity's partitions; never creates its file."""
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


def _report_namespace(
    name: str, entity: str, consumer_group: str, ownerships: list[Ownership],
    checkpoints: list[Checkpoint], heartbeats: list[Heartbeat], local: _Local,
    settings: BalanceSettings, now: float,
) -> _Namespace:
    state, infos, note = local
    report = _Namespace(namespace=name, state=state, notes=[note] if note else [])
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
    pids = set(records) | set(marks) | set(infos or ())
    for pid in sorted(pids, key=_pid_key):
        row = _Partition(namespace=name, partition=pid)
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


async def _read_store(
    store: CheckpointStore, names: Iterable[str], entity: str, consumer_group: str
) -> dict[str, tuple[list[Ownership], list[Checkpoint], list[Heartbeat]]]:
    found = {}
    async with store:
        for name in names:
            group = ConsumerGroupRef(fully_qualified_namespace=name, eventhub_name=entity,
                                     consumer_group=consumer_group)
            found[name] = (await store.list_ownership(group),
                           await store.list_checkpoints(group),
                           await store.list_heartbeats(group))
    return found


# -- opening the store --------------------------------------------------------------------


def _explicit(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, None)


def _choose(ctx: click.Context, store: str | None, connection_string: str | None
            ) -> tuple[str | None, str | None]:
    if store is not None and connection_string is not None:
        # An option given on the command line beats the other's environment variable.
        on_line = (_explicit(ctx, "store"), _explicit(ctx, "connection_string"))
        if on_line == (True, False):
            return store, None
        if on_line == (False, True):
            return None, connection_string
        raise click.UsageError("give --store or --blob-connection-string, not both", ctx=ctx)
    if store is None and connection_string is None:
        raise click.UsageError(
            "no checkpoint store: pass --store PATH or DSN (or set "
            "GEOGATEWAY_CHECKPOINT_STORE), or --blob-connection-string and --container",
            ctx=ctx)
    return store, connection_string


def _open_sqlite(path: Path) -> CheckpointStore:
    from gateway.consumer import SqliteCheckpointStore

    # An inspection creates nothing and writes nothing: read-only (SQLite mode=ro).
    if not path.exists():
        fail(f"no checkpoint store at {path}: check the path")
    if path.is_dir():
        fail(f"{path} is a directory, not a checkpoint store: check the path")
    if path.stat().st_size == 0:
        fail(f"{path} is an empty file, not a checkpoint store: check the path")
    return SqliteCheckpointStore(path, read_only=True)


def _open_postgres(dsn: str, schema: str) -> tuple[CheckpointStore, str]:
    from gateway.consumer import PostgresCheckpointStore

    # Read only: no table is created (a wrong schema is an error, not a new store),
    # and every transaction is READ ONLY.
    store = PostgresCheckpointStore(dsn, schema=schema, read_only=True, connect_timeout=5)
    return store, f"PostgreSQL {store.where}, schema {schema}"


def _open_blob(connection_string: str, container: str) -> CheckpointStore:
    from azure.storage.blob.aio import ContainerClient

    from gateway.consumer import BlobCheckpointStore

    try:
        client = ContainerClient.from_connection_string(
            connection_string, container, **_BLOB_CLIENT_OPTIONS)
    except ValueError as exc:
        # The message may quote the string; fail() redacts, and the string itself is
        # never part of it.
        fail(f"bad --blob-connection-string: {exc}")
    return _OwningBlobStore(BlobCheckpointStore(client), client)


class _OwningBlobStore(CheckpointStore):
    """A blob store and the client it was given, closed together."""

    def __init__(self, store: CheckpointStore, client: Any) -> None:
        self._store, self._client = store, client

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        return await self._store.list_ownership(group)

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        return await self._store.list_checkpoints(group)

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        return await self._store.list_heartbeats(group)

    async def aclose(self) -> None:
        await self._store.aclose()
        await self._client.close()


# -- the command --------------------------------------------------------------------------


def _age(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:.1f}"


def _yes(value: bool | None) -> str | None:
    return None if value is None else "yes" if value else "NO"


def _owner(row: _Partition) -> str:
    return "(released)" if row.released else row.owner or "-"


def _last(row: _Partition) -> str | int | None:
    return "(empty)" if row.empty else row.last_sequence_number


def _summary(ns: _Namespace) -> str:
    def who(instances: list[dict[str, Any]]) -> str:
        return ", ".join(f"{i['instance_id']} owns {i['partitions']}"
                         + (" (leaving)" if i.get("leaving") else "") for i in instances)

    alive, dead = ns.alive, [i for i in ns.instances if not i["alive"]]
    text = f"{ns.namespace} ({ns.state}): {len(alive)} instance(s) alive"
    if alive:
        text += f": {who(alive)}"
    if dead:
        text += f"; not alive: {who(dead)}"
    unowned = sum(1 for p in ns.partitions if not p.owner_alive)
    text += f"; {unowned} partition(s) without a live owner"
    total = ns.total_lag
    return text + ("" if total is None else f"; total lag {total}")


@consumer.command()
@click.option("--store", envvar="GEOGATEWAY_CHECKPOINT_STORE", show_envvar=True,
              help="The SQLite checkpoint store file, or a PostgreSQL DSN "
                   "(postgresql://user:password@host:port/database).")
@click.option("--schema", default="geogateway", show_default=True, envvar="GEOGATEWAY_PG_SCHEMA",
              help="The schema of a PostgreSQL store.")
@click.option("--blob-connection-string", "connection_string",
              envvar="GEOGATEWAY_BLOB_CONNECTION_STRING", show_envvar=True,
              help="A storage connection string: the store is a blob container.")
@click.option("--container", help="The blob container of the store.")
@click.option("-e", "--entity", required=True, help="The event hub (partitioned entity).")
@click.option("--consumer-group", default="$Default", show_default=True)
@click.option("--namespace", "namespaces", multiple=True,
              help="A namespace to show (repeat; default: primary and secondary).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@data_dir_option
@click.pass_context
def status(ctx: click.Context, store: str | None, schema: str, connection_string: str | None,
           container: str | None, entity: str, consumer_group: str,
           namespaces: tuple[str, ...], as_json: bool, data_dir: Path | None) -> None:
    """Who owns which partition of which namespace, lease ages and checkpoint lag.

    Lag is the number of events after the checkpoint (all of them when there is
    none), from the last sequence numbers of the local namespaces in --data-dir;
    a namespace that is down shows its rows from the store with lag '-'.
    """
    store, connection_string = _choose(ctx, store, connection_string)
    names = [n[len("local://"):] if n.startswith("local://") else n
             for n in (namespaces or ("primary", "secondary"))]
    for name in names:
        if not name:
            raise click.BadParameter("a namespace name is empty", param_hint="--namespace")
    names = list(dict.fromkeys(names))
    if connection_string is not None:
        if not container:
            raise click.UsageError("--blob-connection-string needs --container", ctx=ctx)
        opened = _open_blob(connection_string, container)
        where = f"blob container {container}"
    elif is_dsn(store):
        assert store is not None
        opened, where = _open_postgres(store, schema)
    else:
        assert store is not None
        opened = _open_sqlite(Path(store))
        where = store
    found = run(_read_store(opened, names, entity, consumer_group))
    settings = BalanceSettings()
    now = time.time()
    reports = []
    for name in names:
        ownerships, checkpoints, heartbeats = found[name]
        reports.append(_report_namespace(
            name, entity, consumer_group, ownerships, checkpoints, heartbeats,
            _local_partitions(name, entity, data_dir), settings, now))
    if as_json:
        print_json({
            "entity": entity, "consumer_group": consumer_group, "store": where,
            "heartbeat_expiry_seconds": settings.heartbeat_expiry,
            "namespaces": [r.as_json() for r in reports],
        })
        return
    print_table(
        f"consumer group {consumer_group} of {entity} ({where})",
        ("namespace", "partition", "owner", "lease age (s)", "owner alive", "checkpoint",
         "last", "lag"),
        [(p.namespace, p.partition, _owner(p), _age(p.lease_age), _yes(p.owner_alive),
          p.checkpoint_sequence_number, _last(p), p.lag)
         for r in reports for p in r.partitions],
    )
    for r in reports:
        out.print(_summary(r), markup=False)
        for note in r.notes:
            out.print(f"  note: {note}", markup=False)
    out.print(f"alive: a heartbeat within the last {settings.heartbeat_expiry:g} s",
              markup=False)
