"""``geogateway send`` and ``geogateway receive``: quick manual tries."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gateway.cli._common import (
    choice,
    data_dir_option,
    gateway_config,
    out,
    print_json,
    print_table,
    run,
    warning_line,
)
from gateway.cli._progress import LiveProgress
from replication import Message, Mode, PropertyValue

if TYPE_CHECKING:
    from gateway.geo import AsyncGeoSender

#: Seconds ``receive`` waits at most for each namespace's first answer.
_ANSWER_WAIT = 10.0
#: ``send`` prints a row per message up to this many, then a summary line.
_ROWS = 10


def register(group: click.Group) -> None:
    group.add_command(send)
    group.add_command(receive)


def common(func: Any) -> Any:
    for decorator in reversed([
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     envvar="GEOGATEWAY_CONFIG", show_envvar=True,
                     help="Gateway config file (TOML)."),
        click.option("--primary", help="Primary namespace [env var: GEOGATEWAY_PRIMARY; "
                     "default: local://primary]."),
        click.option("--secondary", help="Secondary namespace [env var: GEOGATEWAY_SECONDARY; "
                     "default: local://secondary]."),
        click.option("--entity", "-e", help="Queue to use [env var: GEOGATEWAY_ENTITY]."),
        data_dir_option,
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        func = decorator(func)
    return func


@click.command()
@common
@click.argument("bodies", nargs=-1)
@click.option("--count", type=click.IntRange(min=1), help="Send this many generated messages.")
@click.option("--mode", type=choice(["passive", "active"]),
              help="Replication mode [env var: GEOGATEWAY_MODE; default: passive].")
@click.option("-q", "--durable-queue", type=click.Path(dir_okay=False, path_type=Path),
              help="Buffer here when both namespaces are down [env var: GEOGATEWAY_DURABLE_QUEUE].")
@click.option("--message-id", help="MessageId of a single message (default: generated).")
@click.option("--property", "properties", metavar="NAME=TEXT|NAME:=JSON", multiple=True,
              help="An application property of every message: text, or (:=) a JSON number, "
                   "true, false or null. Repeatable.")
def send(config_path: Path | None, primary: str | None, secondary: str | None,
         entity: str | None, data_dir: Path | None, as_json: bool, bodies: tuple[str, ...],
         count: int | None, mode: str | None, durable_queue: Path | None,
         message_id: str | None, properties: tuple[str, ...]) -> None:
    """Send BODIES (or --count generated messages) through the gateway.

    Past 10 messages the table shows the first 10 and a summary line; --json lists
    every message.
    """
    from gateway.geo import AsyncGeoSender
    from gateway.observability import hooks_from_config

    config = gateway_config(config_path, primary=primary, secondary=secondary, entity=entity,
                            mode=mode, data_dir=data_dir, durable_queue=durable_queue)
    hooks = hooks_from_config(config)
    if not bodies and not count:
        raise click.UsageError("give message bodies or --count N")
    if message_id and (count or len(bodies) != 1):
        raise click.UsageError("--message-id goes with exactly one body")
    props = _properties(properties)
    texts = list(bodies) + [f"message {i}" for i in range(count or 0)]
    messages = [Message(t, message_id=message_id or "", properties=props) for t in texts]

    async def go(bars: LiveProgress) -> list[dict[str, Any]]:
        async with AsyncGeoSender(
            primary=config.primary, secondary=config.secondary, entity=config.entity,
            policy=config.policy, data_dir=config.data_dir, state_dir=config.state_dir,
            roles_store=config.roles_store,
            durable_queue=config.durable_queue.path if config.durable_queue else None,
            recovery=False, hooks=hooks,
        ) as sender:
            results = []
            asked = _asked(sender)
            for m in messages:
                r = await sender.send(m)
                # Passive: went elsewhere than the primary asked for (failed over now, or
                # the other namespace active since an earlier failover) is a failover too.
                away = bool(r.namespaces) and not set(asked) & set(r.namespaces)
                results.append({"message_id": m.message_id, "namespaces": list(r.namespaces),
                                "buffered": list(r.buffered),
                                "failed_over": r.failed_over or away})
                for ns in asked:
                    if ns not in r.namespaces:
                        missed[ns] = missed.get(ns, 0) + 1
                if len(results) % 50 == 0 or len(results) == len(messages):
                    bars.update("sending", len(results), len(messages))
            down.update(sender.down)
            return results

    # A bar for many messages only: one send is over before it would show.
    missed: dict[str, int] = {}
    down: set[str] = set()
    with LiveProgress(enabled=not as_json and len(messages) > _ROWS) as bars, \
            _unusable_said_once() as unusable:
        results = run(go(bars))
    for ns, n in sorted(missed.items()):
        warning_line(_elsewhere(ns, n, results, down=ns in down, why=unusable.get(ns)))
    if as_json:
        print_json(results)
        return
    shown = results if len(results) <= _ROWS else results[:_ROWS]
    title = "sent" if shown is results else f"sent (the first {_ROWS}; --json lists all)"
    print_table(title, ("message_id", "accepted by", "buffered for"),
                [(r["message_id"], ", ".join(r["namespaces"]) or "-",
                  ", ".join(r["buffered"]) or "-") for r in shown])
    if shown is not results:
        out.print(summary(results))


def _asked(sender: AsyncGeoSender) -> tuple[str, ...]:
    """Where a send was asked to go: the primary (passive), both namespaces (active)."""
    roles = sender.roles
    if sender.policy.mode is Mode.ACTIVE:
        return (roles.preferred, roles.standby_preferred)
    return (roles.preferred,)


@contextlib.contextmanager
def _unusable_said_once() -> Iterator[dict[str, str]]:
    """The reasons namespaces are unusable as configured, as the sender logs them once at
    ERROR (namespace -> reason, filled in while the command runs): the command's one
    warning line says it. At the default log level the ERROR line itself is held back."""
    import logging

    from gateway.geo.sender import UNUSABLE_LOG

    found: dict[str, str] = {}

    def hold(record: logging.LogRecord) -> bool:
        if (record.levelno == logging.ERROR and record.msg == UNUSABLE_LOG
                and isinstance(record.args, tuple)):
            namespace, error = record.args
            found[str(namespace)] = str(error)
            return logger.getEffectiveLevel() < logging.ERROR  # said here only with -v
        return True

    logger = logging.getLogger("geogateway")
    logger.addFilter(hold)
    try:
        yield found
    finally:
        logger.removeFilter(hold)


def _elsewhere(namespace: str, count: int, results: list[dict[str, Any]], *,
               down: bool, why: str | None = None) -> str:
    """One line: ``count`` messages were not accepted by ``namespace``, which was asked,
    where they went instead, and why (``why``: the reason it is unusable)."""
    went = sorted({ns for r in results for ns in r["namespaces"] if ns != namespace}
                  | {d for r in results for d in r["buffered"]})
    if why is not None:
        why = f"it is unusable as configured: {why}"
    elif down:
        why = "it is down: run with -v for why"
    else:
        why = ("the other namespace is active since an earlier failover: geogateway "
               "status shows the roles")
    return (f"{count} of {len(results)} messages went to {', '.join(went) or 'nowhere'}, "
            f"not to {namespace} as asked ({why})")


def summary(results: list[dict[str, Any]]) -> str:
    """One line: how many were sent, accepted by each namespace, buffered (for each
    destination), and, when any were, accepted by both and failed over."""
    accepted: Counter[str] = Counter(ns for r in results for ns in r["namespaces"])
    buffered: Counter[str] = Counter(d for r in results for d in r["buffered"])
    both = sum(len(r["namespaces"]) > 1 for r in results)
    failed_over = sum(bool(r["failed_over"]) for r in results)
    parts = [f"sent {len(results)} messages",
             "accepted by " + (", ".join(f"{ns} {n}" for ns, n in sorted(accepted.items()))
                               or "none")]
    if both:
        parts.append(f"by both {both}")
    parts.append("buffered " + (", ".join(f"{n} for {d}" for d, n in sorted(buffered.items()))
                                or "0"))
    if failed_over:
        parts.append(f"failed over {failed_over}")
    return "; ".join(parts)


def _properties(options: tuple[str, ...]) -> dict[str, PropertyValue]:
    """``--property`` options: ``NAME=TEXT`` or ``NAME:=JSON`` (any JSON value: the
    message itself refuses one it cannot carry, naming the property)."""
    import json

    props: dict[str, Any] = {}
    for option in options:
        name, sep, value = option.partition("=")
        typed = name.endswith(":")
        name = name.removesuffix(":")
        if not sep or not name:
            raise click.UsageError(f"--property takes NAME=TEXT or NAME:=JSON, not {option!r}")
        if not typed:
            props[name] = value
            continue
        try:
            props[name] = json.loads(value)
        except ValueError:
            raise click.UsageError(
                f"--property {name}:= takes a JSON value (a number, true, false, null or a "
                f"\"string\"), not {value!r}; use {name}=TEXT for text") from None
    return props


@click.command()
@common
@click.option("--max", "max_messages", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--wait", "max_wait", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds to wait for messages.")
@click.option("--dedup-store", metavar="FILE|DSN",
              help="De-duplication window: a SQLite file, or a PostgreSQL DSN "
                   "(postgresql://...) shared by a fleet [env var: GEOGATEWAY_DEDUP_STORE; "
                   "default: <data dir>/dedup.db].")
@click.option("--peek", is_flag=True, help="Abandon instead of complete (leave them queued).")
def receive(config_path: Path | None, primary: str | None, secondary: str | None,
            entity: str | None, data_dir: Path | None, as_json: bool, max_messages: int,
            max_wait: float, dedup_store: str | None, peek: bool) -> None:
    """Receive de-duplicated messages from both namespaces and complete them.

    Exits 3 when one namespace could not be read (refused, down, no answer; a warning
    line names it), 1 when neither could.
    """
    from gateway.geo import AsyncGeoReceiver
    from gateway.observability import hooks_from_config
    from gateway.transports.local import default_data_dir

    config = gateway_config(config_path, primary=primary, secondary=secondary, entity=entity,
                            data_dir=data_dir, dedup_store=dedup_store)
    hooks = hooks_from_config(config)
    if config.dedup is None:
        default = Path(config.data_dir or default_data_dir()) / "dedup.db"
        # Its default home may not exist yet when both namespaces are in Azure.
        default.parent.mkdir(parents=True, exist_ok=True)
    unread: dict[str, str] = {}

    async def go() -> list[dict[str, Any]]:
        # A DSN opens a PostgreSQL store (a one-line error if it cannot), never a file.
        store = config.dedup.open_store() if config.dedup is not None else default
        async with AsyncGeoReceiver(
            primary=config.primary, secondary=config.secondary, entity=config.entity,
            dedup_store=store, data_dir=config.data_dir, hooks=hooks,
        ) as receiver:
            got = await receiver.receive(max_messages=max_messages, max_wait=max_wait)
            for m in got:
                await (receiver.abandon(m) if peek else receiver.complete(m))
            # Messages from one namespace return at once: let the other answer too, so
            # one that cannot be read is reported, not taken for an empty queue.
            answered = await receiver.wait_answered(max(max_wait, _ANSWER_WAIT))
            unread.update({ns: f"{e}; check its key and that the queue exists"
                           for ns, e in receiver.refused.items()})
            unread.update({ns: "it is down" for ns in receiver.down - set(unread)})
            unread.update({ns: f"no answer within {max(max_wait, _ANSWER_WAIT):g} s"
                           for ns in set(receiver.namespaces) - answered})
            return [{"message_id": m.message_id, "namespace": m.namespace,
                     "body": m.body.decode("utf-8", "replace"),
                     "properties": dict(m.message.properties),
                     "delivery_count": m.delivery_count} for m in got]

    rows = run(go())
    if as_json:
        print_json(rows)
    elif not rows:
        out.print("no messages")
    else:
        print_table("received", ("message_id", "from", "deliveries", "body"),
                    [(r["message_id"], r["namespace"], r["delivery_count"], r["body"][:60])
                     for r in rows])
    for namespace, why in sorted(unread.items()):
        warning_line(f"namespace {namespace} could not be read ({why}); "
                     "only the other namespace's messages were received")
    if unread:
        raise SystemExit(3)
