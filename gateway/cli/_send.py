"""``geogateway send`` and ``geogateway receive``: quick manual tries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gateway.cli._common import data_dir_option, out, print_json, print_table, run, warning_line
from gateway.geo import GatewayConfig, NamespaceConfig
from replication import Message

#: Seconds ``receive`` waits at most for each namespace's first answer.
_ANSWER_WAIT = 10.0


def register(group: click.Group) -> None:
    group.add_command(send)
    group.add_command(receive)


def distinct(primary: Any, secondary: Any) -> None:
    """Refuse the same namespace as primary and secondary (a usage error, not a traceback)."""
    names = [ns.name if isinstance(ns, NamespaceConfig) else NamespaceConfig.parse(ns).name
             for ns in (primary, secondary)]
    if names[0] == names[1]:
        raise click.UsageError(f"primary and secondary are the same namespace ({names[0]!r})")


def _namespaces(config_path: Path | None, primary: str | None, secondary: str | None,
                entity: str | None, data_dir: Path | None) -> dict[str, Any]:
    if config_path is not None:
        config = GatewayConfig.load(config_path)
        target = {
            "primary": primary or config.primary, "secondary": secondary or config.secondary,
            "entity": entity or config.entity, "data_dir": data_dir or config.data_dir,
            "config": config,
        }
    else:
        if entity is None:
            raise click.UsageError("give --entity (or --config with an entity)")
        target = {"primary": primary or "local://primary",
                  "secondary": secondary or "local://secondary",
                  "entity": entity, "data_dir": data_dir, "config": None}
    distinct(target["primary"], target["secondary"])
    return target


def common(func: Any) -> Any:
    for decorator in reversed([
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     envvar="GEOGATEWAY_CONFIG", help="Gateway config file (TOML)."),
        click.option("--primary", help="Primary namespace [default: local://primary]."),
        click.option("--secondary", help="Secondary namespace [default: local://secondary]."),
        click.option("--entity", "-e", help="Queue to use."),
        data_dir_option,
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        func = decorator(func)
    return func


@click.command()
@common
@click.argument("bodies", nargs=-1)
@click.option("--count", type=click.IntRange(min=1), help="Send this many generated messages.")
@click.option("--mode", type=click.Choice(["passive", "active"]), help="Replication mode.")
@click.option("--durable-queue", type=click.Path(dir_okay=False, path_type=Path),
              help="Buffer here when both namespaces are down.")
@click.option("--message-id", help="MessageId of a single message (default: generated).")
def send(config_path: Path | None, primary: str | None, secondary: str | None,
         entity: str | None, data_dir: Path | None, as_json: bool, bodies: tuple[str, ...],
         count: int | None, mode: str | None, durable_queue: Path | None,
         message_id: str | None) -> None:
    """Send BODIES (or --count generated messages) through the gateway."""
    from gateway.geo import AsyncGeoSender

    target = _namespaces(config_path, primary, secondary, entity, data_dir)
    config = target["config"]
    if not bodies and not count:
        raise click.UsageError("give message bodies or --count N")
    if message_id and (count or len(bodies) != 1):
        raise click.UsageError("--message-id goes with exactly one body")
    texts = list(bodies) + [f"message {i}" for i in range(count or 0)]
    messages = [Message(t, message_id=message_id or "") for t in texts]
    if durable_queue is None and config is not None and config.durable_queue is not None:
        durable_queue = config.durable_queue.path

    async def go() -> list[dict[str, Any]]:
        async with AsyncGeoSender(
            primary=target["primary"], secondary=target["secondary"], entity=target["entity"],
            mode=mode, policy=config.policy if config else None,
            durable_queue=durable_queue, data_dir=target["data_dir"],
            state_dir=config.state_dir if config else None, recovery=False,
        ) as sender:
            results = []
            for m in messages:
                r = await sender.send(m)
                results.append({"message_id": m.message_id, "namespaces": list(r.namespaces),
                                "buffered": list(r.buffered)})
            return results

    results = run(go())
    if as_json:
        print_json(results)
        return
    print_table("sent", ("message_id", "accepted by", "buffered for"),
                [(r["message_id"], ", ".join(r["namespaces"]) or "-",
                  ", ".join(r["buffered"]) or "-") for r in results])


@click.command()
@common
@click.option("--max", "max_messages", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--wait", "max_wait", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds to wait for messages.")
@click.option("--dedup-store", type=click.Path(dir_okay=False, path_type=Path),
              help="De-duplication window file [default: <data dir>/dedup.db].")
@click.option("--peek", is_flag=True, help="Abandon instead of complete (leave them queued).")
def receive(config_path: Path | None, primary: str | None, secondary: str | None,
            entity: str | None, data_dir: Path | None, as_json: bool, max_messages: int,
            max_wait: float, dedup_store: Path | None, peek: bool) -> None:
    """Receive de-duplicated messages from both namespaces and complete them.

    Exits 3 when one namespace could not be read (refused, down, no answer; a warning
    line names it), 1 when neither could.
    """
    from gateway.geo import AsyncGeoReceiver
    from gateway.transports.local import default_data_dir

    target = _namespaces(config_path, primary, secondary, entity, data_dir)
    config = target["config"]
    if dedup_store is None:
        dedup_store = (config.dedup.path if config is not None and config.dedup is not None
                       else Path(target["data_dir"] or default_data_dir()) / "dedup.db")
        # Its default home may not exist yet when both namespaces are in Azure.
        dedup_store.parent.mkdir(parents=True, exist_ok=True)
    unread: dict[str, str] = {}

    async def go() -> list[dict[str, Any]]:
        async with AsyncGeoReceiver(
            primary=target["primary"], secondary=target["secondary"], entity=target["entity"],
            dedup_store=dedup_store, data_dir=target["data_dir"],
            dedup_window=config.dedup.window if config is not None and config.dedup else None,
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
