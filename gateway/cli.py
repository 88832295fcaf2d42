"""The ``geogateway`` command: drills, the durable queue, namespaces, quick sends."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from gateway._secrets import RedactingFormatter, redact
from replication import GatewayError

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line to stderr and exit (no traceback)."""
    err.print(f"[bold red]error:[/] {redact(message)}", markup=True)
    raise SystemExit(code)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    out.print(table)


def data_dir_option(func: F) -> F:
    return click.option(
        "--data-dir", type=click.Path(file_okay=False, path_type=Path),
        envvar="GEOGATEWAY_DATA_DIR", show_envvar=True,
        help="Directory of the embedded local namespaces.",
    )(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="geogateway", prog_name="geogateway")
@click.option("-v", "--verbose", count=True,
              help="Log more (-v info, -vv debug, -vvv the Azure SDKs' debug too).")
def cli(verbose: int) -> None:
    """Keep sending and receiving while a whole namespace is down."""
    level = logging.ERROR if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    # The Azure SDKs' own errors reach the user as geogateway's (mapped, one line); their
    # log lines only on request, and their debug output (AMQP frame traces) only at -vvv.
    azure_level = (logging.CRITICAL if verbose == 0 else level if verbose >= 3
                   else max(level, logging.INFO))
    logging.getLogger("azure").setLevel(azure_level)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="geogateway",
                 standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        err.print("aborted")
        return 130
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        err.print(f"[bold red]error:[/] {exc.format_message()}{hint}", markup=True)
        return 2
    except click.ClickException as exc:
        err.print(f"[bold red]error:[/] {exc.format_message()}", markup=True)
        return exc.exit_code
    except GatewayError as exc:
        err.print(f"[bold red]error:[/] {redact(str(exc))}", markup=True)
        return 1
    except OSError as exc:
        err.print(f"[bold red]error:[/] {redact(str(exc))}", markup=True)
        return 1
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _register() -> None:
    # Subcommands live in their own modules to keep each one small.
    from gateway import (
        _cli_consumer,
        _cli_drill,
        _cli_emulator,
        _cli_namespace,
        _cli_queue,
        _cli_send,
    )

    for module in (_cli_consumer, _cli_drill, _cli_emulator, _cli_namespace, _cli_queue, _cli_send):
        module.register(cli)


if __name__ == "__main__":  # pragma: no cover
    # ``python -m gateway.cli``: this module runs as ``__main__``, and the subcommand
    # modules import ``gateway.cli`` (a second copy); run that copy, which registers them.
    from gateway.cli import main as _main

    sys.exit(_main())
else:
    _register()
