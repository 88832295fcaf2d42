"""The relay's command line: ``geogateway relay request|listen``, and the relay part of
``geogateway emulator`` (``--hybrid-connection NAME``).

httpx and aiohttp are imported when a command runs, not when the CLI starts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gateway._support.signals import stop_on_signals
from gateway.cli._common import fail

if TYPE_CHECKING:
    import httpx

    from gateway.emulator import RelayEmulator
    from gateway.relay import GeoRelayListener, Handler, RelayRequest, RelayResponse
    from gateway.relay.protocol import RelayEndpoint

__all__ = ["echo", "load_handler", "make_relay", "register", "relay", "relay_endpoints",
           "relay_ready"]


def make_relay(namespaces: Sequence[str], hybrid_connections: Sequence[str],
               relay_ports: Mapping[str, int], *, data_dir: str | os.PathLike[str] | None,
               key_name: str, key: str, host: str) -> RelayEmulator | None:
    """The relay emulator of ``namespaces`` (None without hybrid connections).

    Raises:
        ConfigError: a bad hybrid connection name, a port for an unknown namespace,
            or two namespaces on one port.
    """
    from replication import ConfigError

    if not hybrid_connections:
        if relay_ports:
            raise ConfigError("--relay-port needs --hybrid-connection NAME")
        return None
    unknown = sorted(set(relay_ports) - set(namespaces))
    if unknown:
        raise ConfigError(f"--relay-port for unknown namespace(s) {', '.join(unknown)}: "
                          f"the namespaces are {', '.join(namespaces)}")
    from gateway.emulator import RelayEmulator

    return RelayEmulator({n: relay_ports.get(n, 0) for n in namespaces}, hybrid_connections,
                         data_dir=data_dir, key_name=key_name, key=key, host=host)


def relay_ready(relay: RelayEmulator, *, secret: bool) -> tuple[dict[str, Any], list[str]]:
    """The relay's ready report: its JSON object, and its text lines."""
    report = {name: {"port": relay.port(name),
                     "hybrid_connections": relay.hybrid_connections,
                     "connection_string": relay.connection_string(name, redact_key=secret)}
              for name in relay.namespaces}
    lines = [f"relay {name} ready on {relay.host}:{relay.port(name)} "
             f"({', '.join(relay.hybrid_connections)}): "
             f"{relay.connection_string(name, redact_key=secret)}" for name in relay.namespaces]
    return report, lines


# -- ``geogateway relay request`` and ``geogateway relay listen`` ------------------------
#: The header by which the built-in echo handler says which namespace served a request.
NAMESPACE_HEADER = "x-geogateway-namespace"


def register(group: click.Group) -> None:
    group.add_command(relay)


@click.group()
def relay() -> None:
    """Send requests to and serve a hybrid connection in two namespaces (Azure Relay)."""


def _endpoint_options(func: Any) -> Any:
    for option in reversed([
        click.option("--primary", envvar="GEOGATEWAY_RELAY_PRIMARY", show_envvar=True,
                     metavar="CONNECTION_STRING",
                     help="The primary namespace's relay connection string."),
        click.option("--secondary", envvar="GEOGATEWAY_RELAY_SECONDARY", show_envvar=True,
                     metavar="CONNECTION_STRING",
                     help="The secondary namespace's relay connection string."),
        click.option("--hybrid-connection", "-c", metavar="NAME",
                     help="The hybrid connection, when the strings have no EntityPath."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="A TOML file with a [relay] table: primary, secondary, "
                          "hybrid_connection (the options above win)."),
    ]):
        func = option(func)
    return func


def relay_endpoints(primary: str | None, secondary: str | None, hybrid_connection: str | None,
                    config_path: Path | None) -> dict[str, RelayEndpoint]:
    """The endpoints given (role → endpoint), from the options and ``--config``.

    Raises:
        ConfigError: an unreadable config, or a bad connection string.
        click.UsageError: none given.
    """
    from gateway.relay.protocol import RelayEndpoint
    from replication import ConfigError

    table: dict[str, Any] = {}
    if config_path is not None:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib

        try:
            table = tomllib.loads(config_path.read_text()).get("relay", {})
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the relay config {config_path}: {exc}") from None
        if not isinstance(table, dict):
            raise ConfigError(f"{config_path}: [relay] must be a table")
    strings = {"primary": primary or table.get("primary"),
               "secondary": secondary or table.get("secondary")}
    path = hybrid_connection or table.get("hybrid_connection")
    endpoints = {}
    for role, conn_str in strings.items():
        if conn_str:
            try:
                endpoints[role] = RelayEndpoint.from_connection_string(str(conn_str), path=path)
            except ConfigError as exc:
                raise ConfigError(f"--{role}: {exc}") from None
    if not endpoints:
        raise click.UsageError("give the relay connection strings: --primary and --secondary "
                               "(or GEOGATEWAY_RELAY_PRIMARY/_SECONDARY, or --config)")
    return endpoints


def _body(data: str | None) -> bytes | None:
    if data is None:
        return None
    if not data.startswith("@"):
        return data.encode()
    source = data[1:]
    try:
        return sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        from replication import ConfigError

        raise ConfigError(f"--data @{source}: cannot read it: {exc.strerror or exc}") from None


def _headers(values: tuple[str, ...]) -> dict[str, str]:
    headers = {}
    for value in values:
        name, sep, text = value.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"{value!r}: write it as 'Name: value'",
                                     param_hint="--header")
        headers[name.strip()] = text.strip()
    return headers


@relay.command()
@click.argument("method")
@click.argument("path", default="")
@click.option("--data", "-d", metavar="TEXT|@FILE",
              help="The request body: text, @FILE for a file's bytes, @- for stdin.")
@click.option("--header", "-H", "header_values", multiple=True, metavar="'NAME: VALUE'",
              help="A request header (repeatable).")
@click.option("--idempotent", is_flag=True, default=None,
              help="Send again after an unknown outcome even if the method is POST/PATCH.")
@_endpoint_options
@click.option("--json", "as_json", is_flag=True,
              help="Print status, headers, body and the namespace that answered as JSON.")
def request(method: str, path: str, data: str | None, header_values: tuple[str, ...],
            idempotent: bool | None, primary: str | None, secondary: str | None,
            hybrid_connection: str | None, config_path: Path | None, as_json: bool) -> None:
    """Send one HTTP request through the relay, failing over to the secondary.

    PATH is the target below the hybrid connection, e.g. /orders/1?x=y. The body is
    printed to stdout; the status line and the namespace that answered to stderr.
    Exits 1 when neither namespace answered.
    """
    if not method.isalpha():
        fail(f"bad HTTP method {method!r}: use GET, PUT, POST, ...", code=2)
    headers = _headers(header_values)
    endpoints = relay_endpoints(primary, secondary, hybrid_connection, config_path)
    if len(endpoints) < 2:
        fail("give both --primary and --secondary: a relay request fails over between two "
             "namespaces", code=2)
    body = _body(data)
    response = asyncio.run(_send(endpoints, method, path, body, headers, idempotent))
    answered = _role_of(response, endpoints)
    if as_json:
        click.echo(json.dumps(_response_json(response, answered), indent=2))
        return
    click.echo(f"{response.status_code} {response.reason_phrase} from {answered} "
               f"({endpoints[answered].namespace})", err=True)
    sys.stdout.buffer.write(response.content)
    sys.stdout.flush()


async def _send(endpoints: dict[str, RelayEndpoint], method: str, path: str,
                body: bytes | None, headers: dict[str, str],
                idempotent: bool | None) -> httpx.Response:
    from gateway.relay import AsyncGeoRelayClient

    async with AsyncGeoRelayClient(endpoints["primary"], endpoints["secondary"],
                                   randomize=False) as client:
        return await client.request(method, path, content=body, headers=headers,
                                    idempotent=idempotent)


def _role_of(response: httpx.Response, endpoints: dict[str, RelayEndpoint]) -> str:
    url = response.request.url
    netloc = url.netloc.decode("ascii").lower()
    for role, ep in endpoints.items():
        if ep.namespace.lower() in (netloc, url.host.lower()):
            return role
    return netloc


def _response_json(response: httpx.Response, role: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": response.status_code, "reason": response.reason_phrase,
        "headers": dict(response.headers), "role": role,
        "namespace": response.request.url.netloc.decode("ascii"),
    }
    try:
        data["body"] = response.content.decode()
    except UnicodeDecodeError:
        import base64

        data["body_base64"] = base64.b64encode(response.content).decode()
    return data


async def echo(request: RelayRequest) -> RelayResponse:
    """The built-in handler of ``relay listen``: the request's body back, and who served it."""
    from gateway.relay import RelayResponse

    headers = {NAMESPACE_HEADER: request.namespace, "x-geogateway-method": request.method,
               "x-geogateway-target": request.target}
    content_type = request.header("content-type")
    if content_type:
        headers["content-type"] = content_type
    return RelayResponse(status=200, headers=headers, body=request.body)


def load_handler(spec: str) -> Handler:
    """``echo``, or ``module:app`` (an ASGI application) as a relay handler.

    Raises:
        ConfigError: not ``module:attribute``, or it cannot be imported or found.
    """
    from replication import ConfigError

    if spec == "echo":
        return echo
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigError(f"--app {spec!r}: give 'echo' or an ASGI app as module:attribute, "
                          "e.g. myservice.web:app")
    import importlib

    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as uvicorn does: the current directory's modules
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error while importing the user's module
        raise ConfigError(f"--app {spec!r}: cannot import {module_name}: "
                          f"{type(exc).__name__}: {exc}") from None
    app = getattr(module, attribute, None)
    if not callable(app):
        raise ConfigError(f"--app {spec!r}: {module_name} has no callable {attribute!r}")
    from gateway.relay import asgi_handler

    return asgi_handler(app)


@relay.command()
@click.option("--app", "app_spec", default="echo", show_default=True, metavar="echo|MODULE:APP",
              help="What answers: the echo handler, or an ASGI application.")
@_endpoint_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line when connected.")
def listen(app_spec: str, primary: str | None, secondary: str | None,
           hybrid_connection: str | None, config_path: Path | None, as_json: bool) -> None:
    """Serve a hybrid connection in both namespaces until Ctrl-C or SIGTERM.

    Prints what it serves once the control channels are open; handler errors and lost
    channels are logged to stderr.
    """
    endpoints = relay_endpoints(primary, secondary, hybrid_connection, config_path)
    handler = load_handler(app_spec)
    asyncio.run(_listen(endpoints, handler, app_spec, as_json))


async def _listen(endpoints: dict[str, RelayEndpoint], handler: Handler, app_spec: str,
                  as_json: bool) -> None:
    import logging

    from gateway.relay import GeoRelayListener
    from replication import ConfigError, MessageRejected

    log = logging.getLogger("geogateway.relay")
    serving = False

    def on_error(error: BaseException) -> None:
        # Before serving, a refusal (no such hybrid connection, a refused token) ends
        # the command with one line of its own; after, every error is logged.
        if serving or not isinstance(error, (ConfigError, MessageRejected)):
            log.error("relay listener: %s: %s", type(error).__name__, error)

    stop = stop_on_signals()
    async with GeoRelayListener(list(endpoints.values()), handler, on_error=on_error) as listener:
        stopping = asyncio.ensure_future(stop.wait())
        ready = asyncio.ensure_future(_ready(listener))
        await asyncio.wait([stopping, ready], return_when=asyncio.FIRST_COMPLETED)
        if ready.done() and not stopping.done():
            ready.result()  # refused, or neither channel opened in 30 s: one line, exit 1
            serving = True
            _print_serving(endpoints, listener.connected, app_spec, as_json)
            gone = asyncio.ensure_future(listener.wait_given_up())
            await asyncio.wait([stopping, gone], return_when=asyncio.FIRST_COMPLETED)
            if gone.done() and not stopping.done():  # every hybrid connection deleted
                _raise_refused(listener.refused)
            gone.cancel()
        ready.cancel()
    click.echo("relay listener stopped", err=True)


async def _ready(listener: GeoRelayListener) -> None:
    """Wait for each channel's first attempt; a refusal then is the command's error."""
    await listener.wait_attempted(30.0)
    _raise_refused(listener.refused)
    await listener.wait_connected(30.0, all_endpoints=False)


def _raise_refused(refused: Mapping[str, Exception]) -> None:
    """Raise the refusals (no such hybrid connection, a refused token) as one error."""
    errors = list(refused.values())
    if len(errors) == 1:
        raise errors[0]
    if errors:
        from replication import ConfigError

        raise ConfigError("; ".join(str(e) for e in errors))


def _print_serving(endpoints: dict[str, RelayEndpoint], connected: list[str], app_spec: str,
                   as_json: bool) -> None:
    rows = {role: {"namespace": ep.namespace, "hybrid_connection": ep.path,
                   "connected": ep.namespace in connected} for role, ep in endpoints.items()}
    if as_json:
        click.echo(json.dumps({"listening": rows, "app": app_spec}))
    else:
        for role, row in rows.items():
            state = "connected" if row["connected"] else "connecting"
            click.echo(f"listening on {role} {row['namespace']}/{row['hybrid_connection']} "
                       f"({state}), serving {app_spec}")
    sys.stdout.flush()
