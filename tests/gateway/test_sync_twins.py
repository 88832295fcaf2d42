"""Every sync driver takes its async twin's arguments, by name and type, and says so.

The sync classes are thin drivers over the async core (DESIGN: never two trees), but
their constructors are spelled out so that editors and mypy check them: these tests
keep the two spellings from drifting apart, and check that a misspelt argument is
reported against the class the caller wrote.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway import (
    GeoPartitionReceiver,
    GeoReceiver,
    GeoSender,
    GeoSessionReceiver,
    OutboxDispatcher,
)
from gateway.aio import (
    AsyncGeoPartitionReceiver,
    AsyncGeoReceiver,
    AsyncGeoSender,
    AsyncGeoSessionReceiver,
    AsyncOutboxDispatcher,
)
from gateway.consumer import AsyncPartitionProcessor, PartitionProcessor
from gateway.relay import AsyncGeoRelayClient, GeoRelayClient

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Twins:
    sync: type[Any]
    aio: type[Any]
    #: Parameters whose type (and description) differ on purpose: the sync class
    #: takes plain functions, sync senders or sync transports there.
    differ: frozenset[str] = frozenset()


TWINS = [
    Twins(GeoSender, AsyncGeoSender),
    Twins(GeoReceiver, AsyncGeoReceiver),
    Twins(GeoPartitionReceiver, AsyncGeoPartitionReceiver),
    Twins(GeoSessionReceiver, AsyncGeoSessionReceiver),
    Twins(OutboxDispatcher, AsyncOutboxDispatcher, frozenset({"senders"})),
    Twins(GeoRelayClient, AsyncGeoRelayClient, frozenset({"transport", "sleep"})),
    Twins(PartitionProcessor, AsyncPartitionProcessor, frozenset({
        "on_event", "on_event_batch", "on_partition_initialize", "on_partition_close",
        "on_error"})),
]
IDS = [t.sync.__name__ for t in TWINS]


def _parameters(cls: type[Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self


@pytest.mark.parametrize("twins", TWINS, ids=IDS)
def test_the_sync_constructor_has_the_async_ones_parameters(twins: Twins) -> None:
    # Given a sync driver and its async twin
    sync, aio = _parameters(twins.sync), _parameters(twins.aio)
    # Then no parameter is a catch-all, and they have the same names, kinds and
    # defaults, in the same order
    assert [p for p in sync if p.kind is p.VAR_KEYWORD] == []
    assert [(p.name, p.kind, p.default) for p in sync] == [
        (p.name, p.kind, p.default) for p in aio]
    # And the same annotations, except where the sync class takes sync things
    assert {p.name: p.annotation for p in sync if p.name not in twins.differ} == {
        p.name: p.annotation for p in aio if p.name not in twins.differ}


_ENTRY = re.compile(r"^ {8}(\*{0,2}[a-z_][a-z_0-9]*(?:(?:, | / )[a-z_][a-z_0-9]*)*):(.*)$")


def args_section(cls: type[Any]) -> dict[str, str]:
    """The ``Args:`` entries of a class docstring, by parameter, in one line each."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    _, found, rest = doc.partition("\nArgs:\n")
    assert found, f"{cls.__name__}'s docstring has no Args section"
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in ("    " + rest).splitlines():
        if line and not line.startswith("    "):
            break  # the next section (Raises:, Returns:) or the end of Args
        match = _ENTRY.match("    " + line)
        if match:
            current = entries.setdefault(match.group(1), [])
            current.append(match.group(2).strip())
        elif line.strip():
            current.append(line.strip())
    # The sync class closes with close(), where the async one has aclose().
    return {name: " ".join(text).replace("aclose", "close") for name, text in entries.items()}


@pytest.mark.parametrize("twins", TWINS, ids=IDS)
def test_the_sync_docstring_documents_the_arguments_as_the_async_one_does(
        twins: Twins) -> None:
    # Given the Args sections of both docstrings
    sync, aio = args_section(twins.sync), args_section(twins.aio)
    # Then they document the same parameters, in the same words where the types agree
    assert sync.keys() == aio.keys()
    differ = {name for name in sync if set(re.split(", | / ", name)) & twins.differ}
    assert {k: v for k, v in sync.items() if k not in differ} == {
        k: v for k, v in aio.items() if k not in differ}


def test_a_misspelt_argument_is_reported_against_the_sync_class() -> None:
    # When a sync sender is given an argument its constructor does not take
    with pytest.raises(TypeError) as caught:
        GeoSender(primry="local://a", secondary="local://b", entity="q")  # type: ignore[call-arg]
    # Then the error names GeoSender (the class the caller wrote), not its async core
    assert str(caught.value).startswith("GeoSender.__init__() got an unexpected keyword")
    assert "primry" in str(caught.value)


SNIPPET = """\
from gateway import (GeoPartitionReceiver, GeoReceiver, GeoSender, GeoSessionReceiver,
                     OutboxDispatcher, SqliteOutbox)
from gateway.relay import GeoRelayClient, RelayEndpoint

GeoSender(primary="local://a", secondary="local://b", entity="q", durable_queu="x")
GeoReceiver(primary="local://a", secondary="local://b", entity="q", dedup_store="d",
            prefetc=5)
GeoPartitionReceiver(primary="local://a", secondary="local://b", entity="h",
                     checkpoint_store="c", dedup_store="d", consumer_grup="g")
GeoSessionReceiver(primary="local://a", secondary="local://b", entity="q",
                   dedup_store="d", gap_timout=1.0)
OutboxDispatcher(SqliteOutbox("o.db"), [], batch_sise=3)
GeoRelayClient(RelayEndpoint.from_connection_string("x"),
               RelayEndpoint.from_connection_string("y"), randomise=False)
GeoSender(primary="local://a", secondary="local://b", entity=3)
"""


@pytest.mark.slow
def test_mypy_checks_the_sync_constructors_arguments(tmp_path: Path) -> None:
    # Given a program that misspells an argument of each sync class, and mistypes one
    program = tmp_path / "program.py"
    program.write_text(SNIPPET)
    # When the project's mypy checks it
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes",
         "--cache-dir", str(ROOT / ".mypy_cache"), str(program)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    # Then it reports each one, against the sync class the program wrote
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    for name, typo in [("GeoSender", "durable_queu"), ("GeoReceiver", "prefetc"),
                       ("GeoPartitionReceiver", "consumer_grup"),
                       ("GeoSessionReceiver", "gap_timout"),
                       ("OutboxDispatcher", "batch_sise"), ("GeoRelayClient", "randomise")]:
        assert f'Unexpected keyword argument "{typo}" for "{name}"' in out, out
    assert 'Argument "entity" to "GeoSender" has incompatible type "int"' in out, out
    assert "Async" not in out, out
    # And nothing else: the same calls, spelt right, are valid
    assert len([line for line in out.splitlines() if ": error:" in line]) == 7, out

