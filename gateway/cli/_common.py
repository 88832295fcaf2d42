"""What every ``geogateway`` command shares: output helpers, common options, ``run``.

The command modules import these from here, never from :mod:`gateway.cli` (which
imports the command modules, on first use, through its ``COMMANDS`` table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from gateway._support.secrets import redact

if TYPE_CHECKING:
    from rich.console import Console

# And ``out`` and ``err``, made on first use by ``__getattr__`` below.
__all__ = ["data_dir_option", "error_line", "fail", "print_json", "print_table", "run",
           "warning_line"]

F = TypeVar("F", bound=Callable[..., Any])

_CONSOLES: dict[str, Console] = {}


def __getattr__(name: str) -> Any:
    # ``out`` and ``err`` (rich consoles for stdout and stderr) are made on first use:
    # importing rich is a third of the start-up time of a command that prints one line.
    if name in ("out", "err"):
        if name not in _CONSOLES:
            from rich.console import Console

            _CONSOLES[name] = Console(stderr=name == "err", highlight=False, soft_wrap=True)
        return _CONSOLES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def error_line(message: str) -> None:
    """Print ``error: MESSAGE`` (secrets redacted) as one line on stderr."""
    click.echo(f"{click.style('error:', fg='red', bold=True)} {redact(message)}", err=True)


def warning_line(message: str) -> None:
    """Print ``warning: MESSAGE`` (secrets redacted) as one line on stderr."""
    click.echo(f"{click.style('warning:', fg='yellow', bold=True)} {redact(message)}", err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line to stderr and exit (no traceback)."""
    error_line(message)
    raise SystemExit(code)


def print_json(data: Any) -> None:
    import json

    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    __getattr__("out").print(table)


def data_dir_option(func: F) -> F:
    return click.option(
        "--data-dir", type=click.Path(file_okay=False, path_type=Path),
        envvar="GEOGATEWAY_DATA_DIR", show_envvar=True,
        help="Directory of the embedded local namespaces.",
    )(func)


def run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)
