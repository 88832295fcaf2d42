"""The configuration reference names every key and variable the code reads, and no other.

The keys come from the loader's own tables (``gateway.geo._config``) and from the
``[relay]`` table of the relay commands; the variables from every ``GEOGATEWAY_*``
string in the package and every ``envvar=`` of the ``geogateway`` commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from gateway.cli import cli
from gateway.drill.consumers._shared import connection_string_variable
from gateway.geo import _config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
#: A table heading of the page: ``### `[retry]` `` or ``### `[primary]`, `[secondary]` ``.
HEADING = re.compile(r"^### (.*)$", re.MULTILINE)
TABLE_NAME = re.compile(r"`\[(\w+)\]`")
#: A key row: its first cell lists keys in backticks.
KEY_ROW = re.compile(r"^\| ((?:`\w+`(?:, )?)+) \|", re.MULTILINE)
VARIABLE = re.compile(r"GEOGATEWAY_[A-Z_]*[A-Z]")


def page_keys(text: str) -> dict[str, set[str]]:
    """Table name ("" for the top level) -> the keys its rows list."""
    keys: dict[str, set[str]] = {}
    sections = HEADING.split(text.split("## Keys", 1)[1].split("\n## ", 1)[0])
    for heading, body in zip(sections[1::2], sections[2::2], strict=True):
        names = TABLE_NAME.findall(heading) or [""]
        found = {key for row in KEY_ROW.findall(body) for key in re.findall(r"`(\w+)`", row)}
        for name in names:
            keys[name] = found
    return keys


def code_keys() -> dict[str, set[str]]:
    keys = {name: set(known) for name, known in _config.SECTION_KEYS.items()}
    keys[""] = set(_config._TOP_KEYS)
    relay = (ROOT / "gateway" / "cli" / "_relay.py").read_text(encoding="utf-8")
    keys["relay"] = set(re.findall(r'table\.get\("(\w+)"\)', relay))
    return keys


def commands(group: click.Group) -> list[click.Command]:
    found: list[click.Command] = []
    with click.Context(group) as ctx:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            found.append(command)
            if isinstance(command, click.Group):
                found += commands(command)
    return found


def code_variables() -> set[str]:
    found: set[str] = set()
    for source in (ROOT / "gateway").rglob("*.py"):
        found |= set(VARIABLE.findall(source.read_text(encoding="utf-8")))
    # the loader's: GEOGATEWAY_<SUFFIX>, and GEOGATEWAY_DEADLINE_<KEY> for the [deadlines] keys
    found |= {_config.ENV_PREFIX + suffix for suffix in _config._ENV_KEYS}
    found |= {f"GEOGATEWAY_DEADLINE_{key.upper()}" for key in _config._DEADLINE_KEYS}
    found.discard("GEOGATEWAY_DEADLINE")
    found.discard("GEOGATEWAY_DRILL")
    found |= {connection_string_variable(name) for name in ("primary", "secondary")}
    for command in commands(cli):
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            found |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    return found


def page_variables(text: str) -> set[str]:
    """Every variable the page names; ``GEOGATEWAY_DEADLINE_FLOOR`, `_CEILING` ...``
    (a prefix's suffixes) expanded."""
    found = set(VARIABLE.findall(text))
    for prefix, rest in re.findall(r"`(GEOGATEWAY_[A-Z]+_)[A-Z_]+`((?:, `_[A-Z_]+`)+)", text):
        found |= {prefix + suffix for suffix in re.findall(r"`_([A-Z_]+)`", rest)}
    return found


def test_the_page_lists_every_key_the_loader_takes() -> None:
    # Given the page and the loader's tables
    listed, known = page_keys(PAGE.read_text(encoding="utf-8")), code_keys()
    # Then each table has the same keys on both
    assert set(listed) == set(known), (sorted(listed), sorted(known))
    wrong = {name: (sorted(listed[name] - known[name]), sorted(known[name] - listed[name]))
             for name in known if listed[name] != known[name]}
    assert wrong == {}, "table: (on the page only, in the code only)"


def test_the_page_lists_every_variable_the_code_reads() -> None:
    listed = page_variables(PAGE.read_text(encoding="utf-8"))
    read = code_variables()
    assert sorted(read - listed) == [], "read by the code, missing from the page"
    assert sorted(listed - read) == [], "on the page, read by nothing"


def test_the_checks_see_a_missing_key_and_variable() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "max_backoff" in page_keys(text)["retry"]
    assert "max_backoff" not in page_keys(text.replace("| `max_backoff` |", "| max |"))["retry"]
    assert "GEOGATEWAY_DEADLINE_PER_MIB" in page_variables(text)
    assert "GEOGATEWAY_OUTBOX" in code_variables()
