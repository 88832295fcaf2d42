"""``geogateway namespace down|up|status|faults`` for the embedded local namespaces.

``down``, ``up`` and ``faults`` write the namespace's control file and nothing else
(they import neither the SQLite store nor rich: scripts and drills call them often).
A name is refused unless it is ``primary``, ``secondary``, a namespace that exists
in the data directory, or one the configuration names: a typo would otherwise take
down a namespace nobody uses and leave the real one up. With a configuration
(``--config``, ``$GEOGATEWAY_CONFIG``, ``$GEOGATEWAY_PRIMARY``/``_SECONDARY``),
``primary`` and ``secondary`` are its namespaces in its data directory, the ones
``geogateway status`` probes; an Azure namespace is refused (only Azure takes it down).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gateway.cli._common import data_dir_option, gateway_config, print_json, print_table
from gateway.transports import ControlFile, namespace_files, prepare_data_dir
from replication import ConfigError

if TYPE_CHECKING:
    from gateway.geo import GatewayConfig

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


def _configuration(config_path: Path | None, data_dir: Path | None) -> GatewayConfig | None:
    """The configuration the other commands run with, when one names the namespaces
    (``--config``, ``$GEOGATEWAY_CONFIG``, ``$GEOGATEWAY_PRIMARY`` / ``_SECONDARY``);
    read only then: loading it costs a third of this command's start-up."""
    if config_path is None and not any(
            os.environ.get(f"GEOGATEWAY_{role.upper()}") for role in DEFAULT_NAMES):
        return None
    return gateway_config(config_path, data_dir=data_dir, needs_entity=False)


@dataclass(frozen=True)
class Target:
    """A local namespace a command acts on: its name, the role the configuration gives
    it (``None``: not configured), its data directory and its control file."""

    name: str
    role: str | None
    directory: str
    control: ControlFile

    def __str__(self) -> str:
        return self.name if self.role in (None, self.name) else f"{self.name} ({self.role})"


def _configured(name: str, config: GatewayConfig) -> tuple[str, str] | None:
    """(role, local name) of ``name`` in ``config``: a role, or a namespace's name.

    Raises:
        click.BadParameter: it names an Azure namespace, which only Azure takes down.
    """
    roles = {"primary": config.primary, "secondary": config.secondary}
    found = [(role, ns) for role, ns in roles.items()
             if name == role or name == ns.name or (ns.is_local and name == ns.local_name)]
    if not found:
        return None
    role, ns = next(((r, n) for r, n in found if r == name), found[0])
    if not ns.is_local:
        raise click.BadParameter(
            f"the {role} of the configuration is {ns.name}, an Azure namespace: it cannot "
            "be taken down or given faults from here (these commands act on local:// "
            "namespaces; try a failover with 'geogateway drill')", param_hint="NAME")
    return role, ns.local_name


def _target(name: str, data_dir: Path | None, config_path: Path | None, *,
            known: bool = True) -> Target:
    """The namespace ``name`` is: with a configuration, ``primary`` and ``secondary``
    are its namespaces (in its data directory), as ``geogateway status`` sees them.

    Raises:
        ConfigError: a bad configuration or data directory.
        click.BadParameter: a bad name, an Azure namespace, or (``known``) an unknown one.
    """
    name = _name(name)
    config = _configuration(config_path, data_dir)
    role: str | None = None
    configured: set[str] = set()
    if config is not None:
        data_dir = config.data_dir
        configured = {ns.local_name for ns in (config.primary, config.secondary)
                      if ns.is_local}
        role, name = _configured(name, config) or (None, name)
    directory = prepare_data_dir(data_dir)
    try:
        _, control = namespace_files(name, directory)
    except ConfigError as exc:  # a name no namespace can have
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    defaults = set(DEFAULT_NAMES) if config is None else configured
    if known and role is None and name not in defaults | existing_names(directory):
        names = sorted(defaults | existing_names(directory))
        # A usage error: the name is a typo far more often than a new namespace.
        raise click.BadParameter(
            f"no namespace {name!r} in {directory}; known namespaces: "
            f"{', '.join(names)} (give --new to create {name!r})", param_hint="NAME")
    return Target(name, role, directory, ControlFile(control))


def config_option(func: Any) -> Any:
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
        envvar="GEOGATEWAY_CONFIG", show_envvar=True,
        help="The gateway's configuration: primary and secondary are its namespaces, in "
             "its data directory (as 'geogateway status' shows them).")(func)


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
@config_option
def down(name: str, new: bool, data_dir: Path | None, config_path: Path | None) -> None:
    """Take namespace NAME down: every client on it fails until 'namespace up'."""
    target = _target(name, data_dir, config_path, known=not new)
    target.control.update(down=True)
    click.echo(f"namespace {target} is down")


@namespace.command()
@click.argument("name")
@new_option
@data_dir_option
@config_option
def up(name: str, new: bool, data_dir: Path | None, config_path: Path | None) -> None:
    """Bring namespace NAME back up (and clear a hang)."""
    target = _target(name, data_dir, config_path, known=not new)
    target.control.update(down=False, hang=False)
    click.echo(f"namespace {target} is up")


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
@config_option
def faults(name: str, latency: float, lost_replies: float, hang: bool | None, new: bool,
           data_dir: Path | None, config_path: Path | None) -> None:
    """Set injected faults on namespace NAME (0 clears them).

    --latency and --lost-replies are set together (one left out is cleared); --hang
    makes every client's operation wait unanswered (the emulator accepts connections
    and sends nothing) until --no-hang or 'namespace up'; without either, a hang is
    kept as it is.
    """
    changes: dict[str, float | bool] = {"latency": latency, "lost_replies": lost_replies}
    if hang is not None:
        changes["hang"] = hang
    target = _target(name, data_dir, config_path, known=not new)
    state = target.control.update(**changes)
    click.echo(f"namespace {target}: latency {latency} s, "
               f"lost replies {lost_replies:.0%}, {'HUNG' if state.hang else 'not hung'}")


def _local_roles(config_path: Path | None, data_dir: Path | None) -> list[str]:
    """The roles whose namespaces are local (an Azure one has no state here to show)."""
    config = _configuration(config_path, data_dir)
    if config is None:
        return list(DEFAULT_NAMES)
    roles = [role for role in DEFAULT_NAMES if getattr(config, role).is_local]
    if not roles:
        raise click.UsageError("both namespaces of the configuration are in Azure: "
                               "'geogateway status' shows their health")
    return roles


def _state(up: bool, hang: bool) -> str:
    if not up:
        return "DOWN, hung" if hang else "DOWN"
    return "HUNG" if hang else "up"


@namespace.command()
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@data_dir_option
@config_option
def status(names: tuple[str, ...], as_json: bool, data_dir: Path | None,
           config_path: Path | None) -> None:
    """Show whether namespaces are up or hung, their faults and their entities
    [default: primary and secondary, the configuration's local ones]."""
    from dataclasses import asdict

    from gateway.transports.local import LocalNamespace

    report: list[dict[str, Any]] = []
    for name in names or _local_roles(config_path, data_dir):
        target = _target(name, data_dir, config_path, known=bool(names))
        ns = LocalNamespace(target.name, data_dir=target.directory)
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
