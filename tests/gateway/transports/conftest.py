from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.transports import LocalNamespace, LocalTransport


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


@pytest.fixture
def namespace(tmp_path: Path) -> Iterator[LocalNamespace]:
    ns = LocalNamespace("primary", data_dir=tmp_path)
    yield ns
    ns.close()


@pytest.fixture
async def transport(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LocalTransport]:
    async with LocalTransport("primary", data_dir=tmp_path, clock=clock) as t:
        yield t
