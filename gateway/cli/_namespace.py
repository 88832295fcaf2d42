"""``geogateway namespace down|up|status|faults`` for the embedded local namespaces.

``down``, ``up`` and ``faults`` write the namespace's control file and nothing else
(they import neither the SQLite store nor rich: scripts and drills call them often).
A name is refused unless it is ``primary``, ``secondary``, a namespace that exists
in the data directory, or one the configuration names: a typo would otherwise take
down a namespace nobody uses and leave the real one up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from gateway.cli._common import data_dir_option, print_json, print_table
from gateway.transports import ControlFile, namespace_files, prepare_data_dir
from replication import ConfigError

DEFAULT_NAMES = ("primary", "secondary")
_SUFFIXES = (".control.json", ".db")
_DEDUP_FILE = "dedup.db"  # the default de-dup store of `geogateway receive`


def register(group: click.Group) -> None:
    group.add_command(namespace)


def _name(name: str) -> str:
    if name.startswith("local://"):
        name = name[len("local://"):]
    if not name or "/" in name:
        raise click.BadParameter(f"{name!r} is not a namespace name", param_hint="NAME")
    return name


def existing_names(directory: str) -> set[str]:
    """The local namespaces that have a namespace or control file in ``directory``
    (``dedup.db``, where ``geogateway receive`` keeps its window, is not one)."""
    try:
        files = os.listdir(directory)
    except OSError:
        return set()
    return {f[: -len(s)] for f in files for s in _SUFFIXES
            if f.endswith(s) and f[: -len(s)] and f != _DEDUP_FILE}


def configured_names() -> set[str]:
    """The local namespaces that ``$GEOGATEWAY_CONFIG`` and ``$GEOGATEWAY_PRIMARY`` /
    ``$GEOGATEWAY_SECONDARY`` name."""
    names = {
        value.strip()[len("local://"):].strip("/")
        for value in (os.environ.get("GEOGATEWAY_PRIMARY"), os.environ.get("GEOGATEWAY_SECONDARY"))
        if value and value.strip().startswith("local://")
    }
    if os.environ.get("GEOGATEWAY_CONFIG"):
        from gateway.geo import GatewayConfig

        config = GatewayConfig.load()
        names |= {ns.local_name for ns in (config.primary, config.secondary) if ns.is_local}
    return names


def _control(name: str, data_dir: Path | None, *, known: bool = True) -> tuple[str, ControlFile]:
    """The data directory and the control file of namespace ``name``.

    Raises:
        ConfigError: a bad data directory.
        click.BadParameter: a bad name, or (``known``) an unknown one.
    """
    name = _name(name)
    directory = prepare_data_dir(data_dir)
    try:
        _, control = namespace_files(name, directory)
    except ConfigError as exc:  # a name no namespace can have
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    if known and name not in DEFAULT_NAMES and name not in existing_names(directory):
        others = configured_names()  # read only when needed: it may load a config file
        if name not in others:
            names = sorted({*DEFAULT_NAMES, *existing_names(directory), *others})
            # A usage error: the name is a typo far more often than a new namespace.
            raise click.BadParameter(
                f"no namespace {name!r} in {directory}; known namespaces: "
                f"{', '.join(names)} (give --new to create {name!r})", param_hint="NAME"
            )
    return directory, ControlFile(control)


def new_option(func: Any) -> Any:
    return click.option(
        "--new", is_flag=True,
        help="Accept a name that is not primary, secondary, configured or existing yet.",
    )(func)


@click.group()
def namespace() -> None:
    """Take embedded namespaces down and up, inject faults, show their state."""


@namespace.command()
@click.argument("name")
@new_option
@data_dir_option
def down(name: str, new: bool, data_dir: Path | None) -> None:
    """Take namespace NAME down: every client on it fails until 'namespace up'."""
    _control(name, data_dir, known=not new)[1].update(down=True)
    click.echo(f"namespace {_name(name)} is down")


@namespace.command()
@click.argument("name")
@new_option
@data_dir_option
def up(name: str, new: bool, data_dir: Path | None) -> None:
    """Bring namespace NAME back up (and clear a hang)."""
    _control(name, data_dir, known=not new)[1].update(down=False, hang=False)
    click.echo(f"namespace {_name(name)} is up")


@namespace.command()
@click.argument("name")
@click.option("--latency", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds added before every operation.")
@click.option("--lost-replies", type=click.FloatRange(min=0, max=1), default=0.0,
              show_default=True,
              help="Share of sends that land but report a timeout to the caller.")
@click.option("--hang/--no-hang", default=None,
              help="Accept connections and operations but answer none, until --no-hang "
                   "or 'namespace up' (left out: kept as it is).")
@new_option
@data_dir_option
def faults(name: str, latency: float, lost_replies: float, hang: bool | None, new: bool,
           data_dir: Path | None) -> None:
    """Set injected faults on namespace NAME (0 clears them).

    --latency and --lost-replies are set together (one left out is cleared); --hang
    makes every client's operation wait unanswered (the emulator accepts connections
    and sends nothing) until --no-hang or 'namespace up'; without either, a hang is
    kept as it is.
    """
    changes: dict[str, float | bool] = {"latency": latency, "lost_replies": lost_replies}
    if hang is not None:
        changes["hang"] = hang
    state = _control(name, data_dir, known=not new)[1].update(**changes)
    click.echo(f"namespace {_name(name)}: latency {latency} s, "
               f"lost replies {lost_replies:.0%}, {'HUNG' if state.hang else 'not hung'}")


def _state(up: bool, hang: bool) -> str:
    if not up:
        return "DOWN, hung" if hang else "DOWN"
    return "HUNG" if hang else "up"


@namespace.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@data_dir_option
def status(names: tuple[str, ...], as_json: bool, data_dir: Path | None) -> None:
    """Show whether namespaces are up or hung, their faults and their entities."""
    from dataclasses import asdict

    from gateway.transports.local import LocalNamespace

    report: list[dict[str, Any]] = []
    for name in names or DEFAULT_NAMES:
        directory, _ = _control(name, data_dir, known=bool(names))
        ns = LocalNamespace(_name(name), data_dir=directory)
        state = ns.status()
        entry = asdict(state)
        entry["entities"] = [asdict(e) for e in ns.entities()] if state.up else []
        report.append(entry)
    if as_json:
        print_json(report)
        return
    print_table(
        "namespaces", ("name", "state", "latency", "lost replies", "entities", "file"),
        [
            (e["name"], _state(e["up"], e["hang"]), f"{e['latency']} s",
             f"{e['lost_replies']:.0%}", len(e["entities"]) if e["up"] else "-", e["path"])
            for e in report
        ],
    )
