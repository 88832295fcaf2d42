"""``geogateway namespace down|up|status|faults`` for the embedded local namespaces."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from gateway.cli import data_dir_option, out, print_json, print_table
from gateway.transports.local import LocalNamespace


def register(group: click.Group) -> None:
    group.add_command(namespace)


def _open(name: str, data_dir: Path | None) -> LocalNamespace:
    if name.startswith("local://"):
        name = name[len("local://"):]
    if not name or "/" in name:
        raise click.BadParameter(f"{name!r} is not a namespace name", param_hint="NAME")
    return LocalNamespace(name, data_dir=data_dir)


@click.group()
def namespace() -> None:
    """Take embedded namespaces down and up, inject faults, show their state."""


@namespace.command()
@click.argument("name")
@data_dir_option
def down(name: str, data_dir: Path | None) -> None:
    """Take namespace NAME down: every client on it fails until 'namespace up'."""
    _open(name, data_dir).down()
    out.print(f"namespace {name} is down")


@namespace.command()
@click.argument("name")
@data_dir_option
def up(name: str, data_dir: Path | None) -> None:
    """Bring namespace NAME back up."""
    _open(name, data_dir).up()
    out.print(f"namespace {name} is up")


@namespace.command()
@click.argument("name")
@click.option("--latency", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds added before every operation.")
@click.option("--lost-replies", type=click.FloatRange(min=0, max=1), default=0.0,
              show_default=True,
              help="Share of sends that land but report a timeout to the caller.")
@data_dir_option
def faults(name: str, latency: float, lost_replies: float, data_dir: Path | None) -> None:
    """Set injected faults on namespace NAME (0 clears them)."""
    _open(name, data_dir).set_faults(latency=latency, lost_replies=lost_replies)
    out.print(f"namespace {name}: latency {latency} s, lost replies {lost_replies:.0%}")


@namespace.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@data_dir_option
def status(names: tuple[str, ...], as_json: bool, data_dir: Path | None) -> None:
    """Show whether namespaces are up, their faults and their entities."""
    if not names:
        names = ("primary", "secondary")
    report: list[dict[str, Any]] = []
    for name in names:
        ns = _open(name, data_dir)
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
            (e["name"], "up" if e["up"] else "DOWN", f"{e['latency']} s",
             f"{e['lost_replies']:.0%}", len(e["entities"]) if e["up"] else "-", e["path"])
            for e in report
        ],
    )
