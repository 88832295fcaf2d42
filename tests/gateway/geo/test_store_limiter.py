"""Store calls have a thread limiter of their own: slow sync handlers filling anyio's
default worker threads (``run(concurrency=40)``) do not hold back the claims and the
done marks that settle messages."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from gateway import SqliteDedupStore
from gateway.geo._hooks import GatewayHooks
from gateway.geo._store_watch import StoreWatch
from replication import Deduplicator

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("hooks", [(), (GatewayHooks(),)], ids=["plain", "timed"])
async def test_store_calls_do_not_wait_behind_slow_sync_handlers(
    tmp_path: Path, hooks: tuple[GatewayHooks, ...]
) -> None:
    # Given a store and its watch, and 40 slow sync handlers running in worker threads
    # as run(concurrency=40) runs them (anyio's default limiter, 40 threads)
    store = SqliteDedupStore(tmp_path / "dedup.db")
    dedup = Deduplicator(store)
    watch = StoreWatch(store, hooks=hooks)
    started = threading.Barrier(41)
    release = threading.Event()

    def slow_handler() -> None:
        started.wait(timeout=2)
        release.wait(timeout=2)

    latencies: list[float] = []
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(anyio.to_thread.run_sync, slow_handler)
            await anyio.to_thread.run_sync(started.wait, 2, limiter=anyio.CapacityLimiter(1))
            # When the receiver claims ids and marks them done meanwhile
            began = time.perf_counter()
            await watch.once("checking ids", dedup.check_many, ["m1", "m2"],
                             timed="check", count=2)
            latencies.append(time.perf_counter() - began)
            began = time.perf_counter()
            await watch.call("marking done", dedup.succeeded_many, ["m1", "m2"],
                             timed="succeeded", count=2)
            latencies.append(time.perf_counter() - began)
            release.set()
    finally:
        release.set()
        store.close()
    # Then neither waited for a handler's thread
    assert max(latencies) < 0.5, latencies
