"""``geogateway proxy``: serve AMQP 1.0 on a local port with the geo configuration's
namespaces behind it, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gateway._support.signals import stop_on_signals
from gateway.cli._common import choice, data_dir_option, each_parsed, fail, gateway_config, run

if TYPE_CHECKING:
    from gateway.amqp.server import Policy
    from gateway.proxy import Proxy

__all__ = ["register"]


def register(group: click.Group) -> None:
    group.add_command(proxy)


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (port 0 picks a free one)")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def _policy(value: str) -> Policy:
    from gateway.amqp.server import parse_policy

    return parse_policy(value)


_policies = each_parsed(_policy)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="GEOGATEWAY_CONFIG", show_envvar=True,
              help="Gateway config file (TOML): the namespaces behind the proxy.")
@click.option("--listen", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Where clients connect (port 0 picks a free port).")
@click.option("--insecure", is_flag=True,
              help="Allow a non-loopback address without TLS: plain AMQP.")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path),
              help="A PEM certificate (chain): serve AMQP over TLS (amqps) on the port given.")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path),
              help="The PEM private key of --tls-cert.")
@click.option("--policy", "policies", multiple=True, callback=_policies,
              metavar="[ENTITY/]NAME=KEY:RIGHTS",
              help="A shared access policy clients may sign with besides the proxy's own "
                   "(repeatable), as the emulator's: RIGHTS from Listen, Send, Manage, "
                   "comma-separated; ENTITY/ limits it to one queue. E.g. "
                   "reader=KEY:Listen or orders/app=KEY:Send,Listen.")
@click.option("--mode", type=choice(["passive", "active"]),
              help="Replication mode [env var: GEOGATEWAY_MODE; default: passive].")
@click.option("--session-gap-timeout", type=click.FloatRange(min=0), default=30.0,
              show_default=True, metavar="SECONDS",
              help="How long a session receiver waits for a missing message of its session "
                   "(in a namespace that is down) before it goes on without it.")
@data_dir_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the ready line as one JSON object (connection_string, port).")
def proxy(config_path: Path | None, listen: str, insecure: bool, tls_cert: Path | None,
          tls_key: Path | None, policies: list[Policy], mode: str | None,
          session_gap_timeout: float, data_dir: Path | None, as_json: bool) -> None:
    """Serve AMQP 1.0 on a local port with the configured namespaces behind it: any SDK,
    geo-redundant.

    Any Service Bus SDK, in any language, sends and receives through one local
    endpoint, with the gateway's failover, durable queue and de-duplication.

    Prints one ready line with the connection string clients use (signed with the
    proxy's own key; the namespaces' never reach a client), then serves until SIGTERM
    or Ctrl-C, answering the sends and settlements it accepted before it exits.
    """
    from gateway.observability import hooks_from_config
    from gateway.proxy import Proxy
    from replication import ConfigError

    host, port = _listen(listen)
    config = gateway_config(config_path, mode=mode, data_dir=data_dir, needs_entity=False)
    try:
        server = Proxy(config, host=host, port=port, insecure=insecure, policies=policies,
                       hooks=hooks_from_config(config), tls_cert=tls_cert, tls_key=tls_key,
                       session_gap_timeout=session_gap_timeout)
    except ConfigError as exc:
        fail(str(exc), code=2)
    sys.exit(run(_serve(server, as_json=as_json)))


async def _serve(server: Proxy, *, as_json: bool) -> int:
    from replication import ConfigError

    try:
        await server.start()
    except ConfigError as exc:
        await server.aclose()
        fail(str(exc), code=2)
    stop = stop_on_signals()
    try:
        _ready(server, as_json=as_json)
        await stop.wait()
        await server.stop()
    finally:
        await server.aclose()
    return 0


def _ready(server: Proxy, *, as_json: bool) -> None:
    report: dict[str, Any] = {"connection_string": server.connection_string(),
                              "port": server.port, "host": server.host}
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        click.echo(f"proxy ready on {server.host}:{server.port}: {report['connection_string']}")
    sys.stdout.flush()
