"""``geogateway emulator``: serve local namespaces to the Azure SDKs over AMQP."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gateway._support.signals import stop_on_signals
from gateway.cli._common import data_dir_option, each_parsed, fail, warning_line
from gateway.emulator import (
    DEFAULT_KEY,
    DEFAULT_KEY_NAME,
    SERVICE_BUS_MAX_MESSAGE_SIZE,
    Emulator,
    EmulatorConfig,
    EventHubSpec,
    Policy,
    QueueSpec,
    TopicSpec,
    is_official,
    load_config,
    parse_event_hub,
    parse_namespace,
    parse_policy,
    parse_topic,
)
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.emulator import RelayEmulator

_DEFAULT_NAMESPACES = {"primary": 5672, "secondary": 5673}


def register(group: click.Group) -> None:
    group.add_command(emulator)


def _namespace(ctx: click.Context, param: click.Parameter,
               values: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    for value in values:
        try:
            name, port = parse_namespace(value)
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from None
        found[name] = port
    return found


_topics = each_parsed(parse_topic)
_policies = each_parsed(parse_policy)
_event_hubs = each_parsed(parse_event_hub)


@click.command()
@click.option("--namespace", "-n", "namespaces", multiple=True, callback=_namespace,
              metavar="NAME=PORT",
              help="A namespace to serve (repeatable; port 0 picks a free one) "
                   "[default: primary=5672 and secondary=5673].")
@click.option("--queue", "-q", "queues", multiple=True, metavar="NAME",
              help="A queue to declare in every namespace (repeatable).")
@click.option("--session-queue", "session_queues", multiple=True, metavar="NAME",
              help="A session-enabled queue to declare in every namespace (repeatable).")
@click.option("--topic", "-t", "topics", multiple=True, callback=_topics,
              metavar="NAME[:SUB,...]",
              help="A topic to declare in every namespace, with subscriptions that take "
                   "every message (repeatable).")
@click.option("--event-hub", "-e", "event_hubs", multiple=True, callback=_event_hubs,
              metavar="NAME:PARTITIONS", help="An event hub to declare (repeatable).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="A TOML file with [namespaces], [[queue]] and [[event_hub]] tables, or "
                   "the official Service Bus emulator's Config.json (JSON), unchanged.")
@data_dir_option
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--key-name", default=None,
              help=f"Shared access key name [default: {DEFAULT_KEY_NAME}].")
@click.option("--key", envvar="GEOGATEWAY_EMULATOR_KEY", show_envvar=True, default=None,
              help="Shared access key [default: SAS_KEY_VALUE, the official emulators' "
                   "well-known key; a key given here replaces it]; "
                   "printed as ***.")
@click.option("--policy", "policies", multiple=True, callback=_policies,
              metavar="[ENTITY/]NAME=KEY:RIGHTS",
              help="A shared access policy besides the default one (repeatable): RIGHTS "
                   "from Listen, Send, Manage, comma-separated; ENTITY/ limits it to one "
                   "entity. E.g. listener=KEY:Listen or orders/app=KEY:Send,Listen.")
@click.option("--max-message-size", type=int, default=None, metavar="BYTES",
              help="The largest Service Bus message accepted [default: 262144, the standard "
                   "tier's 256 KiB]; a queue's own smaller limit applies too.")
@click.option("--hybrid-connection", "--relay", "hybrid_connections", multiple=True,
              metavar="NAME", help="Also serve Azure Relay hybrid connection NAME in every "
                                   "namespace, on a port of its own (repeatable).")
@click.option("--relay-port", "relay_ports", multiple=True, callback=_namespace,
              metavar="NAME=PORT", help="The relay port of a namespace [default: a free one].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line when ready.")
def emulator(namespaces: dict[str, int], queues: tuple[str, ...],
             session_queues: tuple[str, ...], topics: list[TopicSpec],
             event_hubs: list[EventHubSpec], config_path: Path | None, data_dir: Path | None,
             host: str | None, key_name: str | None, key: str | None,
             policies: list[Policy], max_message_size: int | None,
             hybrid_connections: tuple[str, ...], relay_ports: dict[str, int],
             as_json: bool) -> None:
    """Serve Service Bus queues and event hubs of the local namespaces to the Azure SDKs.

    Prints one ready line per namespace with its connection string, then serves
    until interrupted (Ctrl-C or SIGTERM). ServiceBusAdministrationClient manages
    each namespace on the same port (HTTPS with the certificate named when ready;
    needs the serve extra).
    """
    try:
        config = load_config(config_path) if config_path else EmulatorConfig()
        # Namespaces named here replace an official file's one (its entities are
        # declared in each of them); they are added to a TOML file's.
        served = (namespaces or config.namespaces if config_path and is_official(config_path)
                  else {**config.namespaces, **namespaces})
        emu = Emulator(
            served or _DEFAULT_NAMESPACES,
            data_dir=data_dir,
            queues=[*config.queues, *(QueueSpec(name=q) for q in queues),
                    *(QueueSpec(name=q, requires_session=True) for q in session_queues)],
            event_hubs=[*config.event_hubs, *event_hubs],
            topics=[*config.topics, *topics],
            key_name=key_name or config.key_name or DEFAULT_KEY_NAME,
            key=key or DEFAULT_KEY,
            host=host or config.host or "127.0.0.1",
            max_message_size=_first(max_message_size, config.max_message_size,
                                    SERVICE_BUS_MAX_MESSAGE_SIZE),
            policies=[*config.policies, *policies],
        )
        from gateway.cli._relay import make_relay

        relay = make_relay(emu.namespaces, hybrid_connections, relay_ports, data_dir=data_dir,
                           key_name=emu.key_name, key=key or DEFAULT_KEY, host=emu.host)
    except ConfigError as exc:
        fail(str(exc), code=2)
    _log_to(config.logging, data_dir)
    if not emu.admin:
        from gateway.emulator.admin import missing_modules

        warning_line(f"no administration API ({', '.join(missing_modules())} missing): "
                     "pip install 'geogateway[serve]'")
    code = asyncio.run(_serve(emu, secret=key is not None and key != DEFAULT_KEY,
                              as_json=as_json, relay=relay))
    if code:
        raise SystemExit(code)


def _log_to(kinds: tuple[str, ...], data_dir: Path | None) -> None:
    """Send the emulator's log lines where the official file's ``Logging.Type`` says."""
    if not kinds:
        return
    from gateway._support.logs import RedactingFormatter
    from gateway.transports import default_data_dir

    log = logging.getLogger("gateway.emulator")
    log.setLevel(logging.INFO)
    formatter = RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if "file" in kinds:
        directory = Path(data_dir) if data_dir is not None else Path(default_data_dir())
        directory.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(directory / "emulator.log")
        handler.setFormatter(formatter)
        log.addHandler(handler)
    if "console" not in kinds:
        log.propagate = False  # the file only, as the official emulator's "File"
    elif not logging.getLogger().isEnabledFor(logging.INFO):
        handler = logging.StreamHandler()
        handler.setFormatter(formatter)
        log.addHandler(handler)
        log.propagate = False


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


async def _serve(emu: Emulator, *, secret: bool, as_json: bool,
                 relay: RelayEmulator | None = None) -> int:
    try:
        await emu.start()
        if relay is not None:
            await relay.start()
    except ConfigError as exc:
        await emu.aclose()
        fail(str(exc), code=2)
    stop = stop_on_signals()
    log = logging.getLogger("gateway.emulator")
    for name in emu.namespaces:
        log.info("namespace %s serves on %s:%d", name, emu.host, emu.port(name))
    try:
        _ready(emu, secret=secret, as_json=as_json, relay=relay)
        await stop.wait()
    finally:
        if relay is not None:
            await relay.aclose()
        await emu.aclose()
    return 0


def _ready(emu: Emulator, *, secret: bool, as_json: bool,
           relay: RelayEmulator | None = None) -> None:
    from gateway.cli._relay import relay_ready

    relay_report, relay_lines = relay_ready(relay, secret=secret) if relay else ({}, [])
    if as_json:
        report = {name: {"port": emu.port(name),
                         "connection_string": emu.connection_string(name, redact_key=secret)}
                  for name in emu.namespaces}
        extra: dict[str, object] = {"relay": relay_report} if relay else {}
        if emu.certificate is not None:
            extra["certificate"] = emu.certificate
        click.echo(json.dumps({"namespaces": report, **extra}, sort_keys=True))
    else:
        for name in emu.namespaces:
            click.echo(f"namespace {name} ready on {emu.host}:{emu.port(name)}: "
                       f"{emu.connection_string(name, redact_key=secret)}")
        if emu.certificate is not None:
            click.echo("administration API on the same ports (HTTP, and HTTPS trusting "
                       f"{emu.certificate}: connection_verify=)")
        for line in relay_lines:
            click.echo(line)
    sys.stdout.flush()
