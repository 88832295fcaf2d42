"""``replay()`` never returns 0 while messages wait without saying why.

It once returned 0 with 2 messages waiting, no error, right after ``namespace up``:
the sender knew which destinations held messages only from when it started, so
messages another process (``geogateway send``, a drill, a second instance) buffered
into the same file afterwards were invisible to its replays, the background ones too.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from durable_queue import DurableQueue, Replayer
from gateway import ReplayReport
from gateway.aio import AsyncGeoSender
from gateway.transports import FaultyTransport
from replication import Message, QueueCorrupt, ReplicationPolicy
from tests.gateway.conftest import Namespaces, SenderFactory, wait_for

pytestmark = pytest.mark.anyio


def buffer_in_another_process(queue: Path, data_dir: Path, state_dir: Path) -> None:
    """``geogateway send`` in its own process, both namespaces down: it buffers two."""
    env = {**os.environ, "GEOGATEWAY_DATA_DIR": str(data_dir),
           "GEOGATEWAY_STATE_DIR": str(state_dir)}
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "send", "-e", "orders", "--durable-queue",
         str(queue), "--json", "a", "b"],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    with DurableQueue(queue) as q:
        assert q.count("*/orders") == 2


def waiting(queue: Path) -> int:
    with DurableQueue(queue) as q:
        return len(q)


@pytest.mark.parametrize("background", [False, True])
async def test_messages_another_process_buffered_after_start_are_replayed(
    ns: Namespaces, data_dir: Path, state_dir: Path, tmp_path: Path, background: bool,
) -> None:
    # Given a running sender on a queue file, with nothing buffered when it started
    queue = tmp_path / "buffer.db"
    async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                              entity="orders", data_dir=data_dir, state_dir=state_dir,
                              durable_queue=queue, recovery=background) as sender:
        assert (await sender.send(Message(b"first", message_id="first"))).namespaces
        # And two messages another process buffered in the same file while both
        # namespaces were down
        ns.primary.down()
        ns.secondary.down()
        buffer_in_another_process(queue, data_dir, state_dir)
        # When the namespaces come back
        ns.primary.up()
        ns.secondary.up()
        if background:
            # Then the background recovery replays them (it never did), and takes them
            # off the file once sent (just after they land)
            await wait_for(lambda: ns.count("primary") + ns.count("secondary") == 3)
            await wait_for(lambda: waiting(queue) == 0)
        else:
            # Then replay() sends them (it returned 0 and left them waiting)
            report = await sender.replay()
            assert report == 2 and report.waiting == {} and report.reasons == {}
            assert ns.count("primary") + ns.count("secondary") == 3
        with DurableQueue(queue) as q:
            assert len(q) == 0


async def test_a_destination_another_replayer_holds_is_reported_with_its_holder(
    make_sender: SenderFactory, ns: Namespaces, tmp_path: Path,
) -> None:
    # Given two buffered messages, and another replayer (another process) draining them
    with DurableQueue(tmp_path / "buffer.db") as queue:
        queue.put_many("*/orders", [Message(b"a", message_id="a"), Message(b"b", message_id="b")])
        other = Replayer(queue, "*/orders", owner="host-b:4242:cafe")
        assert other.acquire()
        sender = make_sender(durable_queue=queue)
        # When this sender replays
        report = await sender.replay()
        # Then it sent nothing, and says how many wait and why
        assert isinstance(report, ReplayReport) and report == 0
        assert report.waiting == {"*/orders": 2} and report.still_waiting == 2
        assert "another replayer (host-b:4242:cafe) is draining it" in report.reasons["*/orders"]
        # And once the other one let go, the next replay sends them
        other.release()
        assert await sender.replay() == 2


async def test_a_namespace_that_fails_the_send_is_named(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport, tmp_path: Path,
) -> None:
    # Given messages buffered for the primary, which this new sender has not seen down
    with DurableQueue(tmp_path / "buffer.db") as queue:
        queue.put("primary/orders", Message(b"a", message_id="a"))
        sender = make_sender(durable_queue=queue)
        primary.go_down()
        # When it replays / Then the send failed, and the report says where and why
        report = await sender.replay()
        assert report == 0 and report.waiting == {"primary/orders": 1}
        assert report.reasons["primary/orders"].startswith("sending to primary failed (")
        # And the next replay, the primary now marked down, says its probe failed
        report = await sender.replay()
        assert report.reasons == {"primary/orders": "namespace primary is down (its probe failed)"}
        # And when it is back, it is sent and nothing waits
        primary.come_up()
        report = await sender.replay()
        assert (report, report.waiting, report.reasons) == (1, {}, {})


async def test_both_namespaces_down_is_said_so(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, tmp_path: Path,
) -> None:
    with DurableQueue(tmp_path / "buffer.db") as queue:
        queue.put("*/orders", Message(b"a", message_id="a"))
        sender = make_sender(durable_queue=queue)
        primary.go_down()
        secondary.go_down()
        first = await sender.replay()
        assert first == 0 and first.reasons["*/orders"].startswith("no namespace took them")
        second = await sender.replay()
        assert second.reasons == {
            "*/orders": "no namespace is up (primary and secondary: their probes failed)"}
        # And the report still reads as the count it always was
        assert f"{second}" == "0" and second + 1 == 1 and "waiting" in repr(second)


async def test_a_file_that_cannot_say_what_it_holds_is_logged_once_not_every_round(
    ns: Namespaces, data_dir: Path, state_dir: Path, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a running sender (background recovery every 10 ms) on a queue file holding
    # another entity's messages, whose index pages then get damaged on disk
    queue = tmp_path / "buffer.db"
    with DurableQueue(queue) as q:
        q.put_many("elsewhere/invoices", [Message(b"x" * 100, message_id=f"e{i}")
                                          for i in range(2000)])
    policy = ReplicationPolicy(probe_interval=0.01)
    with caplog.at_level(logging.ERROR):
        async with AsyncGeoSender(primary="local://primary", secondary="local://secondary",
                                  entity="orders", data_dir=data_dir, state_dir=state_dir,
                                  durable_queue=queue, policy=policy) as sender:
            damage_index_pages(queue, b"elsewhere/invoices")
            # (a write by another connection makes the sender read the pages again)
            conn = sqlite3.connect(queue)
            conn.execute("INSERT INTO leases VALUES ('x', 'y', 0)")
            conn.commit()
            conn.close()
            # When its recovery rounds meet the damage, round after round
            await wait_for(lambda: any("cannot read which destinations" in r.getMessage()
                                       for r in caplog.records))
            rounds = sender._recovery
            for _ in range(20):
                await rounds.round()
            # Then an explicit replay() raises it
            with pytest.raises(QueueCorrupt):
                await sender.replay()
    # And the log said it once, naming the file, with no traceback per round
    lines = [r for r in caplog.records if str(queue) in r.getMessage()]
    assert len(lines) == 1, [r.getMessage()[:80] for r in caplog.records]
    assert not any("recovery round failed" in r.getMessage() for r in caplog.records)


def damage_index_pages(path: Path, key: bytes) -> None:
    """Overwrite every page that holds many index entries of ``key``."""
    page = 4096
    data = bytearray(path.read_bytes())
    for n in range(len(data) // page):
        if data[n * page:(n + 1) * page].count(key) > 40:
            data[n * page:(n + 1) * page] = b"\xa5" * page
    path.write_bytes(bytes(data))
