"""The ``geogateway`` command: drills, the durable queue, namespaces, quick sends.

Start-up time matters here (``geogateway namespace down primary`` runs in scripts and
drills): each subcommand's module, and with it the SDKs, SQLite stores and rich, is
imported only when that subcommand runs; ``--help`` imports none of them.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from gateway import __version__
from gateway.cli._common import error_line, extra_of
from replication import GatewayError

__all__ = ["main"]

#: The subcommands: name -> (the module whose ``register(group)`` adds it, its summary).
#: ``geogateway --help`` lists them from these summaries (a test keeps them equal to
#: the commands' own), so it imports none of the modules.
COMMANDS: dict[str, tuple[str, str]] = {
    "consumer": ("gateway.cli._consumer",
                 "Inspect the partition-balanced consumers of an entity."),
    "drill": ("gateway.cli._drill",
              "Run a failover drill on two namespaces and print the report."),
    "emulator": ("gateway.cli._emulator", "Serve Service Bus queues and event hubs of the "
                 "local namespaces to the Azure SDKs."),
    "namespace": ("gateway.cli._namespace",
                  "Take embedded namespaces down and up, inject faults, show their state."),
    "outbox": ("gateway.cli._outbox", "Dispatch a transactional outbox (PostgreSQL or "
               "SQLite) and show what waits in it."),
    "postgres": ("gateway.cli._postgres", "Start, stop and show an embedded PostgreSQL "
                 "server (for trying the fleet stores)."),
    "proxy": ("gateway.cli._proxy", "Serve AMQP 1.0 on a local port with the configured "
              "namespaces behind it: any SDK, geo-redundant."),
    "queue": ("gateway.cli._queue",
              "Inspect, export, purge, replay and salvage the durable queue."),
    "receive": ("gateway.cli._send",
                "Receive de-duplicated messages from both namespaces and complete them."),
    "relay": ("gateway.cli._relay", "Send requests to and serve a hybrid connection in two "
              "namespaces (Azure Relay)."),
    "send": ("gateway.cli._send",
             "Send BODIES (or --count generated messages) through the gateway."),
    "serve": ("gateway.cli._serve", "Serve /healthz, /readyz, /metrics and /status over HTTP."),
    "status": ("gateway.cli._serve", "Show each namespace's role and health, the durable "
               "queue's backlog and the partition owners, as /status does."),
}


def help_width() -> int:
    """The width of the help text: what click's ``HelpFormatter`` would choose.

    Click asks ``shutil.get_terminal_size`` when no width is given, and importing
    :mod:`shutil` (with ``bz2``, ``lzma`` and ``zlib``) costs ``--help`` more than
    printing it; the same answer from :func:`os.get_terminal_size`.
    """
    forced = click.formatting.FORCED_WIDTH  # click's test runner sets it
    if forced is not None:
        return forced
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return max(min(columns or 80, 80) - 2, 50)


class LazyGroup(click.Group):
    """A group whose subcommands are imported when they run (see :data:`COMMANDS`)."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # The subcommands' contexts inherit the width from this one.
        if parent is None:
            extra.setdefault("terminal_width", help_width())
        return super().make_context(info_name, args, parent, **extra)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name][0]).register(self)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            command = self.commands.get(name) or click.Command(name, help=COMMANDS[name][1])
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="geogateway")
@click.option("-v", "--verbose", count=True,
              help="Log more (-v info, -vv debug, -vvv the Azure SDKs' debug too).")
def cli(verbose: int) -> None:
    """Keep sending and receiving while a whole namespace is down."""
    # Imported here, not at the top: `--help` and `--version` never get this far, and
    # logging is a fifth of what they would import.
    import logging

    from gateway._support.logs import RedactingFormatter

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
        click.echo("aborted", err=True)
        return 130
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        error_line(f"{exc.format_message()}{hint}")
        return 2
    except click.ClickException as exc:
        error_line(exc.format_message())
        return exc.exit_code
    except ModuleNotFoundError as exc:
        extra = extra_of(exc)
        if extra is None:
            raise
        error_line(f"this command needs the {extra} extra ({exc.name} is not installed): "
                   f"pip install 'geogateway[{extra}]'")
        return 2
    except (GatewayError, OSError) as exc:
        error_line(str(exc))
        # A missing extra is the install's shortcoming, not the run's: exit 2, as for
        # any usage error, whichever layer found it.
        return 2 if extra_of(exc) else 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0

