"""A replay whose queue file is locked by another process waits in a worker thread:
the sender's event loop goes on (other tasks run, other sends are hedged)."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from pathlib import Path

import anyio
import pytest

from durable_queue import DurableQueue
from gateway.transports import FaultyTransport
from replication import Message
from tests.gateway.conftest import SenderFactory

pytestmark = pytest.mark.anyio

HELD = 0.8  # how long the other "process" holds the queue file's write lock


def hold_lock(path: Path, locked: threading.Event) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(HELD)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


async def test_a_replay_waiting_for_the_queue_files_lock_leaves_the_loop_running(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
    tmp_path: Path,
) -> None:
    # Given 50 messages buffered while both namespaces were down, both back now
    path = tmp_path / "buffer.db"
    with DurableQueue(path) as queue:
        sender = make_sender(durable_queue=queue)
        primary.go_down()
        secondary.go_down()
        await sender.send_batch([Message(b"x", message_id=f"m{i}") for i in range(50)])
        primary.come_up()
        secondary.come_up()
        # When another process holds the queue file's write lock during a replay
        locked = threading.Event()
        holder = threading.Thread(target=hold_lock, args=(path, locked))
        holder.start()
        assert locked.wait(2)
        ticks: list[float] = []
        stop = anyio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(time.perf_counter())
                await anyio.sleep(0.01)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker)
                await anyio.sleep(0.02)
                sent = await sender.replay()
                stop.set()
        finally:
            holder.join()
        # Then the loop kept running while the replay waited, and the replay went on
        # once the lock was released
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        assert max(gaps) < 0.3, f"the loop stood still for {max(gaps):.2f} s"
        assert ticks[-1] - ticks[0] >= HELD * 0.5
        assert sent == 50 and queue.count() == 0
