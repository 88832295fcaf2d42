"""Every command's options, read from click's command tree: one help style, and
choices that take any case (as the ``GEOGATEWAY_*`` variables do)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from gateway.cli import cli
from tests.gateway.cli.cli_support import Run

pytestmark = pytest.mark.usefixtures("dirs")


def commands(group: click.Group = cli, path: str = "geogateway"
             ) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` (its lazy subcommands loaded), with its path."""
    ctx = click.Context(group, info_name=path)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} {name}")


ALL = sorted(commands(), key=lambda pair: pair[0])
OPTIONS = [(f"{path} {param.opts[0]}", param) for path, command in ALL
           for param in command.params if isinstance(param, click.Option)]


def test_the_tree_is_walked() -> None:
    paths = {path for path, _ in ALL}
    assert {"geogateway send", "geogateway namespace down", "geogateway relay request",
            "geogateway postgres stop", "geogateway outbox run"} <= paths


@pytest.mark.parametrize("where, option", [pair for pair in OPTIONS
                                           if isinstance(pair[1].type, click.Choice)],
                         ids=lambda value: value if isinstance(value, str) else "")
def test_every_choice_takes_any_case(where: str, option: click.Option) -> None:
    assert isinstance(option.type, click.Choice)
    assert option.type.case_sensitive is False, f"{where}: give case_sensitive=False"


@pytest.mark.parametrize("where, option", [pair for pair in OPTIONS if pair[1].envvar],
                         ids=lambda value: value if isinstance(value, str) else "")
def test_every_option_read_from_the_environment_says_so(where: str,
                                                        option: click.Option) -> None:
    assert option.show_envvar, f"{where}: give show_envvar=True ([env var: ...] in its help)"


@pytest.mark.parametrize("path, command", ALL, ids=[path for path, _ in ALL])
def test_help_names_environment_variables_in_one_style(path: str,
                                                       command: click.Command) -> None:
    # Given the help as printed (wrapped lines joined again)
    ctx = click.Context(command, info_name=path)
    text = " ".join(command.get_help(ctx).split())
    # Then every bracket that names a variable is click's own "[env var: NAME...]"
    assert not re.search(r"\[env(?! var: )", text), text
    assert "[env var: " not in text or re.search(r"\[env var: [A-Z_]+[];]", text), text


def test_a_choice_in_another_case_is_taken(run: Run) -> None:
    code, out, err = run("send", "-e", "orders", "--mode", "Active", "hello", "--json")
    assert code == 0, err
    assert "primary" in out and "secondary" in out  # active: both namespaces took it
