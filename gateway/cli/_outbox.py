"""``geogateway outbox run|stats``: dispatch a transactional outbox, and look into it.

``--outbox`` is a PostgreSQL DSN (the outbox tables in ``--schema``) or the path of
the application's SQLite file. A DSN's password is better kept out of the command
line: give it in ``$GEOGATEWAY_OUTBOX``, or leave it out of the DSN and let libpq read
``$PGPASSWORD`` or the ``~/.pgpass`` file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gateway._support.signals import stop_on_signals
from gateway.cli._common import (
    choice,
    data_dir_option,
    err,
    fail,
    gateway_config,
    print_json,
    print_table,
    run,
)
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.geo import AsyncGeoSender, GatewayConfig
    from gateway.stores import Outbox


def register(group: click.Group) -> None:
    group.add_command(outbox)


@click.group()
def outbox() -> None:
    """Dispatch a transactional outbox (PostgreSQL or SQLite) and show what waits in it."""


def _outbox_options(func: Any) -> Any:
    for decorator in reversed([
        click.option("--outbox", "target", envvar="GEOGATEWAY_OUTBOX", show_envvar=True,
                     required=True, metavar="DSN|PATH",
                     help="A PostgreSQL DSN, or the application's SQLite file."),
        click.option("--schema", default="geogateway", show_default=True,
                     help="The PostgreSQL schema of the outbox tables."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        func = decorator(func)
    return func


def open_outbox(target: str, schema: str, lease: float | None = None) -> Outbox:
    """A ``PostgresOutbox`` for a DSN, a ``SqliteOutbox`` for an existing file.

    Raises:
        ConfigError: the server cannot be used, or there is no file at the path.
    """
    from gateway.stores import PostgresOutbox, SqliteOutbox, is_dsn

    if is_dsn(target):
        return PostgresOutbox(target, schema=schema, lease=lease or 60.0)
    if not Path(target).is_file():
        raise ConfigError(f"no SQLite file at {target}: give the application's database "
                          "file, or a PostgreSQL DSN (postgresql://...)")
    return SqliteOutbox(target, lease=lease or 30.0)


@outbox.command()
@_outbox_options
def stats(target: str, schema: str, as_json: bool) -> None:
    """Rows waiting per destination, the oldest's age, and rows moved aside as dead."""
    try:
        store = open_outbox(target, schema)
    except ConfigError as exc:
        fail(str(exc), 2)
    try:
        found = store.stats()
    finally:
        store.close()
    if as_json:
        print_json({"outbox": store.where, **found.to_dict()})
        return
    rows = [(name, d.waiting, f"{d.oldest_age:.1f} s")
            for name, d in sorted(found.destinations.items())]
    print_table(f"outbox {store.where}", ("destination", "waiting", "oldest"),
                rows or [("(none)", 0, "-")])
    click.echo(f"waiting {found.waiting}, dead {found.dead}")


@outbox.command("run")
@_outbox_options
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="GEOGATEWAY_CONFIG", show_envvar=True,
              help="Gateway config file (TOML): the namespaces, mode, durable queue.")
@click.option("--primary", help="Primary namespace [env var: GEOGATEWAY_PRIMARY; default: "
              "local://primary].")
@click.option("--secondary", help="Secondary namespace [env var: GEOGATEWAY_SECONDARY; default: "
              "local://secondary].")
@click.option("--mode", type=choice(["passive", "active"]),
              help="Replication mode [env var: GEOGATEWAY_MODE; default: passive].")
@data_dir_option
@click.option("--entity", "-e", "entities", multiple=True,
              help="Dispatch only this destination (repeatable) [default: every destination "
                   "in the outbox; the config's entity is not used].")
@click.option("--batch", "batch_size", type=click.IntRange(1, 5000), default=100,
              show_default=True, help="Rows per send, per destination.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Destinations sent at the same time.")
@click.option("--lease", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="How long a destination this dispatcher claimed stays its own at most: "
                   "a killed dispatcher's destinations are taken over after this (SQLite; "
                   "PostgreSQL sees a killed one at once and ends a hung one's claim "
                   "after it) [default: 30 for SQLite, 60 for PostgreSQL].")
@click.option("--drain", is_flag=True,
              help="Exit once a round finds nothing to send, instead of waiting for rows.")
def run_command(target: str, schema: str, as_json: bool, config_path: Path | None,
                primary: str | None, secondary: str | None, mode: str | None,
                data_dir: Path | None, entities: tuple[str, ...], batch_size: int,
                concurrency: int, lease: float | None, drain: bool) -> None:
    """Send the outbox's committed rows through the gateway, in order per destination,
    until SIGINT/SIGTERM (or, with --drain, until nothing is left to send)."""
    try:
        config = gateway_config(config_path, primary=primary, secondary=secondary, mode=mode,
                                data_dir=data_dir, needs_entity=False)
        store = open_outbox(target, schema, lease)
    except ConfigError as exc:
        fail(str(exc), 2)
    # A dispatcher runs for days: its warnings (a failed send, the store lost) must
    # reach the terminal without -v.
    logger = logging.getLogger("geogateway")
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        counts = run(_dispatch(store, config, entities, batch_size, concurrency, drain))
    finally:
        store.close()
    if as_json:
        print_json({"outbox": store.where, **counts})
    else:
        print_table(f"outbox {store.where}", ("", "value"), sorted(counts.items()))
    if drain and (counts["send_errors"] or counts["store_errors"]):
        fail(f"{counts['send_errors']} sends and {counts['store_errors']} outbox writes "
             "failed (see the warnings above); the rows they held wait for the next run")


async def _dispatch(store: Outbox, config: GatewayConfig, entities: tuple[str, ...],
                    batch_size: int, concurrency: int, drain: bool) -> dict[str, Any]:
    from gateway.geo import AsyncGeoSender, AsyncOutboxDispatcher

    def sender(entity: str) -> AsyncGeoSender:
        return AsyncGeoSender(
            primary=config.primary, secondary=config.secondary, entity=entity,
            policy=config.policy, data_dir=config.data_dir, state_dir=config.state_dir,
            durable_queue=config.durable_queue.path if config.durable_queue else None)

    async def made(entity: str) -> AsyncGeoSender:
        started = sender(entity)
        await started.start()
        return started

    fixed = [await made(e) for e in dict.fromkeys(entities)]
    dispatcher = AsyncOutboxDispatcher(store, fixed or made, batch_size=batch_size,
                                       concurrency=concurrency)
    stop = stop_on_signals()
    err.print(f"dispatching the outbox at {store.where} as {dispatcher.name} "
              f"(pid {os.getpid()}); SIGINT or SIGTERM stops", markup=False)
    try:
        if drain:
            while not stop.is_set() and await dispatcher.dispatch_once():
                pass
        else:
            await dispatcher.run(stop=stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().remove_signal_handler(sig)
        await dispatcher.aclose()
        for one in fixed:
            with contextlib.suppress(Exception):
                await one.aclose()
    left = await asyncio.to_thread(store.stats)
    stats = dispatcher.stats
    return {"sent": stats.sent, "batches": stats.batches, "dead": stats.dead,
            "send_errors": stats.send_errors, "store_errors": stats.store_errors,
            "waiting": left.waiting}
