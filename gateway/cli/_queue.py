"""``geogateway queue stats|list|replay|purge|export|salvage`` for the durable queue."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

import click

from durable_queue import DurableQueue, SalvageReport, UnreadableRows
from gateway.cli._common import (
    data_dir_option,
    fail,
    out,
    print_json,
    print_table,
    run,
    warning_line,
)
from gateway.cli._progress import LiveProgress
from gateway.geo import GatewayConfig
from replication import QueueCorrupt, parse_destination


def register(group: click.Group) -> None:
    group.add_command(queue)


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def queue_path_option(func: Any) -> Any:
    func = click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        envvar="GEOGATEWAY_CONFIG", show_envvar=True,
        help="Read durable_queue.path from this file.",
    )(func)
    return click.option(
        "-q", "--queue", "queue_path", type=click.Path(dir_okay=False, path_type=Path),
        envvar="GEOGATEWAY_DURABLE_QUEUE", show_envvar=True, help="The durable queue file.",
    )(func)


def _resolve(queue_path: Path | None, config_path: Path | None) -> Path:
    if queue_path is None and config_path is not None:
        config = GatewayConfig.load(config_path)
        if config.durable_queue is not None:
            queue_path = config.durable_queue.path
    if queue_path is None:
        fail("no durable queue given: pass --queue PATH, set GEOGATEWAY_DURABLE_QUEUE, "
             "or durable_queue.path in --config", code=2)
    if not queue_path.exists():
        fail(f"no durable queue at {queue_path}: check the path")
    if queue_path.is_file() and queue_path.stat().st_size == 0:
        # Opening would turn it into a new queue; an inspection must not write.
        fail(f"{queue_path} is an empty file, not a durable queue: check the path")
    return queue_path


@contextlib.contextmanager
def _opened(queue_path: Path | None, config_path: Path | None) -> Iterator[DurableQueue]:
    q = DurableQueue(_resolve(queue_path, config_path))
    try:
        yield q
    finally:
        q.close()


@click.group()
def queue() -> None:
    """Inspect, export, purge, replay and salvage the durable queue."""


@queue.command()
@queue_path_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def stats(queue_path: Path | None, config_path: Path | None, as_json: bool) -> None:
    """Messages waiting per destination, dead letters, file size."""
    with _opened(queue_path, config_path) as q:
        s = q.stats()
    if as_json:
        print_json(asdict(s))
        return
    print_table(
        f"durable queue {s.path}",
        ("destination", "waiting", "bytes", "oldest", "dead-lettered", "buffered for"),
        [(d.destination, d.count, d.bytes, _when(d.oldest_enqueued_at), d.dead_letters,
          d.owner or "-") for d in s.destinations],
    )
    out.print(f"waiting: {s.count} ({s.bytes} bytes)  dead-lettered: {s.dead_letters}  "
              f"file: {s.file_bytes} bytes")


@queue.command(name="list")
@queue_path_option
@click.option("--destination", help="Only this destination (namespace/entity).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--dead-letters", is_flag=True, help="List the dead-letter table instead.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_(queue_path: Path | None, config_path: Path | None, destination: str | None,
          limit: int, dead_letters: bool, as_json: bool) -> None:
    """The oldest waiting (or dead-lettered) messages, without removing them."""
    with _opened(queue_path, config_path) as q:
        # The oldest rows sit on the first pages: without a check of the whole file a
        # damaged page further in would be missed (stats, export and replay read it).
        q.check()
        items: list[Any] = (
            q.dead_letters(destination, limit=limit) if dead_letters
            else q.peek(destination, limit=limit)
        )
    rows = [
        {"id": i.id, "destination": i.destination, "message_id": i.message.message_id,
         "size": len(i.message.body), "enqueued_at": _when(i.enqueued_at),
         **({"reason": i.reason} if dead_letters else {"attempts": i.attempts})}
        for i in items
    ]
    if as_json:
        print_json(rows)
        return
    columns = list(rows[0]) if rows else ["id", "destination", "message_id"]
    print_table("dead letters" if dead_letters else "waiting", columns,
                [list(r.values()) for r in rows])


@queue.command()
@queue_path_option
@click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True),
              default="-", help="Write JSON lines here (default stdout); created 0600.")
@click.option("--destination", help="Only this destination.")
@click.option("--dead-letters", is_flag=True, help="Include dead-lettered messages.")
def export(queue_path: Path | None, config_path: Path | None, output: str,
           destination: str | None, dead_letters: bool) -> None:
    """Write messages as JSON lines (bodies as UTF-8 text or base64)."""
    with _opened(queue_path, config_path) as q, _private_output(output) as fp:
        count = q.export(fp, destination, include_dead_letters=dead_letters)
    click.echo(f"exported {count} messages", err=True)


@contextlib.contextmanager
def _private_output(output: str) -> Iterator[TextIO]:
    """stdout for ``-``, else ``output`` truncated and readable by its owner only:
    it holds message bodies, as the queue file does."""
    if output == "-":
        yield sys.stdout
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        fail(f"cannot write {output}: {_why_not_writable(output, exc)}")
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    except OSError:
        os.close(fd)
        raise
    with open(fd, "w", encoding="utf-8") as fp:
        yield fp


def _why_not_writable(output: str, exc: OSError) -> str:
    parent = os.path.dirname(os.path.abspath(output))
    if exc.errno == errno.ENOENT:
        return f"the directory {parent} does not exist; create it or choose another -o"
    if exc.errno == errno.ENOTDIR:
        return f"a part of {parent} is not a directory; choose another -o"
    if exc.errno == errno.EISDIR:
        return "it is a directory; give a file name with -o"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (f"permission denied in {parent}; choose another -o in a directory "
                "you can write")
    return f"{exc.strerror or exc}; choose another -o"


@queue.command()
@queue_path_option
@click.option("--destination", help="Only this destination.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(queue_path: Path | None, config_path: Path | None, destination: str | None,
          yes: bool) -> None:
    """Delete waiting messages (all, or one destination's). They are gone for good."""
    with _opened(queue_path, config_path) as q:
        waiting = len(q) if destination is None else sum(
            d.count for d in q.stats().destinations if d.destination == destination)
        if not yes and not (sys.stdin.isatty() and click.confirm(
                f"delete {waiting} waiting messages?")):
            fail("not purged: pass --yes to confirm", code=2)
        removed = q.purge(destination)
    out.print(f"purged {removed} messages")


def _entity(dest: str) -> str:
    """The entity of a destination; a malformed one (a file written by other code) is
    a one-line error, not a traceback."""
    try:
        return parse_destination(dest)[1]
    except ValueError as exc:
        fail(f"{exc}: this queue file was not written by a geogateway sender; "
             "export its messages with `geogateway queue export`")


@queue.command()
@queue_path_option
@click.option("--primary", help="Primary namespace [env var: GEOGATEWAY_PRIMARY; default: "
              "--config's, else local://primary].")
@click.option("--secondary", help="Secondary namespace [env var: GEOGATEWAY_SECONDARY; default: "
              "--config's, else local://secondary].")
@click.option("--dead-letters", is_flag=True, help="Requeue dead-lettered messages first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@data_dir_option
def replay(queue_path: Path | None, config_path: Path | None, primary: str | None,
           secondary: str | None, dead_letters: bool, as_json: bool,
           data_dir: Path | None) -> None:
    """Send buffered messages to their namespaces now, in order.

    Exits 3 when messages still wait (their namespaces are down), 1 on an error
    (a damaged file, left as it was: see `queue salvage`; a file whose messages
    were buffered for other namespaces).
    """
    from gateway.cli._common import gateway_config
    from gateway.geo import AsyncGeoSender
    from gateway.observability import hooks_from_config

    path = _resolve(queue_path, config_path)
    # The entities are the queue's own; the rest as every command reads it.
    config = gateway_config(config_path, primary=primary, secondary=secondary,
                            data_dir=data_dir, needs_entity=False)
    hooks = hooks_from_config(config)
    results: list[dict[str, Any]] = []
    sent: dict[str, int] = {}
    #: What waits per destination when the replay starts: the bars' totals.
    totals: dict[str, int] = {}

    async def go(bars: LiveProgress) -> None:
        def show(destination: str, replayed: int) -> None:
            sent[destination] = replayed
            bars.update(f"replaying {destination}", replayed, totals.get(destination))

        q = DurableQueue(path)
        try:
            if dead_letters:
                q.requeue_dead_letters()
            if bars.shown:  # the bars' totals (counting costs a read of the index)
                totals.update((d.destination, d.count) for d in q.stats().destinations)
            entities = sorted({_entity(d) for d in q.destinations()})
            for entity in entities:
                async with AsyncGeoSender(
                    primary=config.primary, secondary=config.secondary, entity=entity,
                    durable_queue=q, data_dir=config.data_dir, recovery=False,
                    policy=config.policy, state_dir=config.state_dir,
                    roles_store=config.roles_store, hooks=hooks,
                ) as sender:
                    report = await sender.replay(progress=show)
                    results.append({"entity": entity, "replayed": int(report),
                                    "remaining": sorted(sender.backlog),
                                    "down": sorted(sender.down),
                                    "why": dict(report.reasons)})
        finally:
            q.close()

    with LiveProgress(enabled=not as_json) as bars:
        try:
            run(go(bars))
        except QueueCorrupt as exc:
            fail(f"{_stopped(sum(sent.values()))}: {exc}")
    if as_json:
        print_json(results)
    else:
        print_table("replay", ("entity", "replayed", "still waiting for"),
                    [(r["entity"], r["replayed"], ", ".join(r["remaining"]) or "-")
                     for r in results])
    waiting = [d for r in results for d in r["remaining"]]
    if waiting:
        reasons = sorted({why for r in results for why in r["why"].values()})
        down = sorted({ns for r in results for ns in r["down"]})
        if down:
            reasons.append(f"namespaces down: {', '.join(down)}")
        why = "; ".join(reasons) or "another replayer holds them"
        fail(f"not all replayed: messages still wait for {', '.join(waiting)} ({why}); "
             f"run again when they are back", code=3)


def _stopped(sent: int) -> str:
    """What a replay that found a damaged file had done: the first half of its error."""
    if not sent:
        return "replay stopped before sending anything"
    return (f"replay stopped after sending {sent} messages (a later replay may send some "
            f"of them again: delivery is at-least-once, receivers drop the copies by "
            f"MessageId)")


@queue.command(name="salvage")
@queue_path_option
@click.option("--output", "-o", type=click.Path(path_type=Path), required=True,
              help="The new queue file (created 0600).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def salvage_(queue_path: Path | None, config_path: Path | None, output: Path, force: bool,
             as_json: bool) -> None:
    """Copy every message that can still be read from a damaged queue file into a new
    one, in order, and say what could not be read. The damaged file is only read.

    Exits 0 when everything was read, 3 when some rows could not be (the new file
    holds the rest), 1 when nothing could be.
    """
    from durable_queue import salvage

    report = salvage(_resolve(queue_path, config_path), output, force=force)
    if as_json:
        print_json({**asdict(report), "complete": report.complete})
    else:
        _print_salvage(report)
    if not report.complete:
        warning_line(f"{_lost(report)} could not be read: {report.target} holds the rest; "
                     f"replay it with `geogateway queue replay -q {report.target}`")
        raise SystemExit(3)


def _print_salvage(report: SalvageReport) -> None:
    print_table(
        f"salvaged {report.source} -> {report.target}",
        ("destination", "messages", "dead-lettered", "could not be read"),
        [(d.destination, d.messages, d.dead_letters,
          "?" if d.unreadable is None else d.unreadable) for d in report.destinations],
    )
    for gap in report.unreadable:
        out.print(f"could not read: {_gap(gap)}")
    if report.damaged_pages:
        out.print(f"damaged pages: {', '.join(map(str, report.damaged_pages))}")
    out.print(f"copied {report.messages} messages, {report.dead_letters} dead letters, "
              f"{report.bindings} bindings")


def _gap(gap: UnreadableRows) -> str:
    last = "the end" if gap.last_id is None else str(gap.last_id)
    count = "an unknown number of rows" if gap.count is None else f"{gap.count} rows"
    whose = f" of {', '.join(gap.destinations)}" if gap.destinations else ""
    return f"{gap.table} ids {gap.first_id} to {last}: {count}{whose}"


def _lost(report: SalvageReport) -> str:
    counts = [g.count for g in report.unreadable]
    if None in counts:
        return f"{len(report.unreadable)} ranges of rows (counts unknown)"
    return f"{sum(c or 0 for c in counts)} rows"
