"""The processor's owner levels come from the checkpoint store, not the machine's clock."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.consumer import InMemoryCheckpointStore
from gateway.consumer._partition import CloseReason
from gateway.transports import LocalNamespace, LocalTransport
from tests.gateway.consumer.test_processor import HUB, Recorder, processor, send, until

pytestmark = pytest.mark.anyio
PARTITIONS = {"0", "1", "2", "3"}


@pytest.fixture
async def hubs(tmp_path: Path) -> AsyncIterator[tuple[LocalTransport, LocalTransport]]:
    """Two processes' transports on one local namespace."""
    LocalNamespace("primary", data_dir=tmp_path).create_partitioned(HUB, partitions=4)
    a, b = (LocalTransport("primary", data_dir=tmp_path) for _ in range(2))
    yield a, b
    await a.aclose()
    await b.aclose()


async def test_a_new_owner_fences_a_stale_one_whose_clock_runs_ahead(
        hubs: tuple[LocalTransport, LocalTransport]) -> None:
    # Given an instance on a machine whose clock is an hour ahead, reading every
    # partition, whose ownership manager then hangs while its readers go on
    store = InMemoryCheckpointStore()
    stale, survivor = Recorder(), Recorder()
    ahead = processor(hubs[0], store, stale, "ahead", clock=lambda: time.time() + 3600)
    await ahead.start()
    await until(lambda: ahead.owned == PARTITIONS)
    assert ahead._task is not None
    ahead._task.cancel()  # its records go stale; its readers do not know
    # When an instance on another machine takes the partitions over
    async with processor(hubs[1], store, survivor, "b") as b:
        await until(lambda: b.owned == PARTITIONS)
        # Then the stale readers are fenced off, whatever the clocks say
        await until(lambda: {p for p, r in stale.closed
                             if r is CloseReason.OWNERSHIP_LOST} == PARTITIONS)
        # and the new owner handles what comes next
        ids = await send(hubs[1], 0, 20)
        await until(lambda: set(survivor.seen) == set(ids))
    assert not set(stale.seen) & set(ids)
