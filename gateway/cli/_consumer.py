"""``geogateway consumer status``: who owns which partition, lease ages, checkpoint lag.

Reads one consumer group of one entity from a checkpoint store (a SQLite file, a
PostgreSQL database or an Azure Blob Storage container), per namespace, and the last
sequence number of each partition from the embedded local namespaces, to show how
far behind each checkpoint is. It only reads: a missing store file is an error, never
created, and a PostgreSQL store is read in READ ONLY transactions, its tables never
created.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gateway.cli._common import data_dir_option, fail, out, print_json, print_table, run
from gateway.consumer import (
    BalanceSettings,
    Checkpoint,
    CheckpointStore,
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
)
from gateway.observability import ConsumerNamespaceStatus, PartitionStatus, consumer_status
from gateway.stores import is_dsn

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


def _owner(row: PartitionStatus) -> str:
    return "(released)" if row.released else row.owner or "-"


def _last(row: PartitionStatus) -> str | int | None:
    return "(empty)" if row.empty else row.last_sequence_number


def _summary(ns: ConsumerNamespaceStatus) -> str:
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
              show_envvar=True,
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
    settings = BalanceSettings()

    async def read() -> list[ConsumerNamespaceStatus]:
        async with opened:
            return await consumer_status(opened, names, entity=entity,
                                         consumer_group=consumer_group, data_dir=data_dir,
                                         now=time.time(), settings=settings)

    reports = run(read())
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
