"""``geogateway serve`` (the health and status endpoints) and ``geogateway status``."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from gateway.cli._common import (
    data_dir_option,
    fail,
    gateway_config,
    out,
    print_json,
    print_table,
    require_extra,
    run,
)
from gateway.geo import GatewayConfig
from gateway.observability import DEFAULT_PROBE_DEADLINE, GatewayStatus

#: ``geogateway status`` exits with this when the gateway is not ready.
NOT_READY = 3


def register(group: click.Group) -> None:
    group.add_command(serve)
    group.add_command(status)


def _options(func: Any) -> Any:
    for option in reversed((
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     envvar="GEOGATEWAY_CONFIG", show_envvar=True,
                     help="The gateway's configuration file (its namespaces, entity, "
                          "durable queue and state dir, as the senders use it)."),
        click.option("-e", "--entity", help="The entity [default: --config's]."),
        click.option("--checkpoint-store", type=click.Path(dir_okay=False, path_type=Path),
                     envvar="GEOGATEWAY_CHECKPOINT_STORE", show_envvar=True,
                     help="The partition consumers' SQLite checkpoint store: show partition "
                          "owners and checkpoint lag."),
        click.option("--consumer-group", default="$Default", show_default=True),
        click.option("--probe-deadline", type=click.FloatRange(min=0.01), show_default=True,
                     default=DEFAULT_PROBE_DEADLINE,
                     help="Seconds each namespace has to answer its probe."),
        data_dir_option,
    )):
        func = option(func)
    return func


def _config(config_path: Path | None, entity: str | None, data_dir: Path | None,
            checkpoint_store: Path | None) -> GatewayConfig:
    config = gateway_config(config_path, entity=entity, data_dir=data_dir, needs_entity=False)
    if checkpoint_store is not None and config.entity == "*":
        raise click.UsageError("--checkpoint-store needs the entity: give -e (or entity in "
                               "--config, or GEOGATEWAY_ENTITY)")
    return config


@click.command()
@_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True,
              help="The port (0: any free one; the address is printed).")
@click.option("--max-age", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Seconds a status is reused by the next request.")
def serve(config_path: Path | None, entity: str | None, checkpoint_store: Path | None,
          consumer_group: str, probe_deadline: float, data_dir: Path | None, host: str,
          port: int, max_age: float) -> None:
    """Serve /healthz, /readyz, /metrics and /status over HTTP.

    /readyz answers 200 when at least one namespace is usable and the durable queue is
    writable, else 503 with the reasons. Runs until Ctrl-C or SIGTERM.
    """
    require_extra("serve", "uvicorn", "starlette", "prometheus_client",
                  purpose="geogateway serve")
    import uvicorn

    from gateway.observability import create_app

    config = _config(config_path, entity, data_dir, checkpoint_store)
    app = create_app(config, checkpoint_store=checkpoint_store, consumer_group=consumer_group,
                     probe_deadline=probe_deadline, max_age=max_age)
    sock = _listen(host, port)
    bound = sock.getsockname()[1]

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Handled below instead: uvicorn's own handlers raise the signal again once
            # it has stopped, and a stop asked for would end as "killed by SIGTERM".
            yield

    server = Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))

    def stop() -> None:
        server.should_exit = True

    async def go() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        # uvicorn says it is listening with a flag only.
        while not server.started and not serving.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if server.started:
            where = f"[{host}]" if ":" in host else host
            click.echo(f"serving http://{where}:{bound} (/healthz /readyz /metrics /status)")
            sys.stdout.flush()
        await serving
        await app.state.status_reader.aclose()  # probes past their deadline end first

    try:
        run(go())
    finally:
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is in use: choose another --port", code=2)
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; check --host and "
             "--port", code=2)
    except socket.gaierror as exc:
        sock.close()
        fail(f"cannot listen on {host}: {exc}; check --host", code=2)
    sock.set_inheritable(True)
    return sock


@click.command()
@_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def status(config_path: Path | None, entity: str | None, checkpoint_store: Path | None,
           consumer_group: str, probe_deadline: float, data_dir: Path | None,
           as_json: bool) -> None:
    """Show each namespace's role and health, the durable queue's backlog and the
    partition owners, as /status does.

    Exits 3 when the gateway is not ready (no namespace usable, or the durable queue
    not writable).
    """
    from gateway.observability import collect_status

    config = _config(config_path, entity, data_dir, checkpoint_store)
    current = run(collect_status(config, checkpoint_store=checkpoint_store,
                                 consumer_group=consumer_group, probe_deadline=probe_deadline))
    if as_json:
        print_json(current.to_json())
    else:
        show_status(current)
    if not current.ready:
        raise SystemExit(NOT_READY)


def _age(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:.1f} s"


def show_status(current: GatewayStatus) -> None:
    """Print the status as tables (its redacted JSON form)."""
    data = current.to_json()
    print_table(f"namespaces of {data['entity']} ({data['mode']})",
                ("namespace", "configured as", "url", "role", "state", "probe"),
                [(n["name"], n["preferred"], n["url"], n["role"], n["state"],
                  None if n["probe_seconds"] is None else f"{n['probe_seconds']:.3f} s")
                 for n in data["namespaces"]])
    for n in data["namespaces"]:
        if n["reason"]:
            out.print(f"{n['name']} {n['state']}: {n['reason']}", markup=False)
    queue = data["durable_queue"]
    if queue is not None:
        print_table(f"durable queue {queue['path']}",
                    ("destination", "waiting", "bytes", "oldest", "dead-lettered",
                     "buffered for"),
                    [(d["destination"], d["waiting"], d["bytes"], _age(d["oldest_age_seconds"]),
                      d["dead_letters"], d["buffered_for"]) for d in queue["destinations"]])
        writable = "writable" if queue["writable"] else f"NOT WRITABLE: {queue['reason']}"
        out.print(f"durable queue: {writable}; {queue['waiting']} waiting, oldest "
                  f"{_age(queue['oldest_age_seconds']) or '-'}", markup=False)
    consumers = data["consumers"]
    if consumers is not None:
        print_table(f"consumer group {consumers['consumer_group']} ({consumers['store']})",
                    ("namespace", "partition", "owner", "owner alive", "checkpoint", "lag"),
                    [(p["namespace"], p["partition"], p["owner"],
                      None if p["owner_alive"] is None else "yes" if p["owner_alive"] else "NO",
                      p["checkpoint_sequence_number"], p["lag"])
                     for ns in consumers["namespaces"] for p in ns["partitions"]])
        if consumers["error"]:
            out.print(f"consumers: {consumers['error']}", markup=False)
    for note in data["notes"]:
        out.print(f"note: {note}", markup=False)
    when = time.strftime("%H:%M:%S", time.localtime(current.checked_at))
    if data["ready"]:
        out.print(f"ready (checked {when})", markup=False)
    else:
        out.print(f"NOT READY (checked {when}): " + "; ".join(data["not_ready"]), markup=False)
