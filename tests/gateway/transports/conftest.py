from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.transports import LocalNamespace, LocalTransport
from tests.conftest import FakeClock


@pytest.fixture
def namespace(tmp_path: Path) -> Iterator[LocalNamespace]:
    ns = LocalNamespace("primary", data_dir=tmp_path)
    yield ns
    ns.close()


@pytest.fixture
async def transport(tmp_path: Path, clock: FakeClock) -> AsyncIterator[LocalTransport]:
    async with LocalTransport("primary", data_dir=tmp_path, clock=clock) as t:
        yield t
