from __future__ import annotations

import pytest

from tests.azurite import azurite, azurite_port, container
from tests.postgres import freeze, pg, pg_server_factory, pg_session_server
from tests.warm import pytest_sessionstart

# fixtures for every test
__all__ = ["azurite", "azurite_port", "container", "freeze", "pg", "pg_server_factory",
           "pg_session_server",
           "pytest_sessionstart"]  # the test modules compiled once (tests/warm.py)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    """A wall clock that moves only when told to."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
