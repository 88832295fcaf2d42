"""AsyncGeoSender's replay: one replayer per destination, and a queue file that
breaks while replaying is reported, never waited on."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from durable_queue import DurableQueue
from gateway import GeoSender
from gateway.aio import AsyncGeoSender
from gateway.geo._config import NamespaceConfig
from gateway.geo._factory import open_transport
from gateway.transports import FaultyTransport
from replication import ConfigError, Message, MessageRejected, NamespaceUnavailable, QueueCorrupt
from tests.durable_queue._damage import damaged_queue
from tests.gateway.conftest import Namespaces, Recorder, SenderFactory, wait_for

pytestmark = pytest.mark.anyio


class ReplayFailures(Recorder):
    def on_replay_failed(self, **kw: object) -> None:
        self.events.append(("on_replay_failed", dict(kw)))


async def test_replay_while_background_recovery_runs_sends_each_message_once(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, tmp_path: Path,
) -> None:
    # Given 2,000 messages buffered while both namespaces were down
    with DurableQueue(tmp_path / "buffer.db") as queue:
        sender = make_sender(durable_queue=queue, recovery=True)
        primary.go_down()
        secondary.go_down()
        for start in range(0, 2_000, 100):
            await sender.send_batch([Message(b"x", message_id=f"m{i}")
                                     for i in range(start, start + 100)])
        assert queue.count() == 2_000
        # When both come back (slowly: each send takes 2 ms) and the background
        # recovery is draining while the application calls replay() itself
        primary.latency = secondary.latency = 0.002
        primary.come_up()
        secondary.come_up()
        await sender.start()
        await wait_for(lambda: queue.count() < 1_900)
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(sender.replay)
        await wait_for(lambda: not sender.backlog)
        # Then every id was delivered exactly once, in order
        delivered = await ns.drain_ids("primary") + await ns.drain_ids("secondary")
        counts = Counter(delivered)
        assert len(delivered) == 2_000, f"{len(delivered)} deliveries for 2,000 ids"
        assert set(counts.values()) == {1}
        assert delivered == [f"m{i}" for i in range(2_000)]


async def test_replay_of_a_damaged_queue_raises_to_the_caller_and_the_hook(
    make_sender: SenderFactory, ns: Namespaces, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a queue file whose middle page is damaged, holding 300 messages
    path = tmp_path / "buffer.db"
    damaged_queue(path, "*/orders")
    hooks = ReplayFailures()
    with DurableQueue(path) as queue:
        sender = make_sender(durable_queue=queue, hooks=hooks)
        # When the application replays
        with pytest.raises(QueueCorrupt) as caught, caplog.at_level(logging.WARNING):
            await sender.replay()
        # Then QueueCorrupt reaches it, the hook and the log, naming the file
        assert str(path) in str(caught.value)
        failed = hooks.named("on_replay_failed")
        assert [f["destination"] for f in failed] == ["*/orders"]
        assert failed[0]["error"] is caught.value
        assert any(str(path) in r.getMessage() for r in caplog.records)
        # And the damage was found before anything was sent (or removed from the file)
        assert await ns.drain_ids("primary") == []
        assert queue.count() == 300
        # And a new send does not quietly join the backlog that cannot drain
        with pytest.raises(QueueCorrupt):
            await sender.send(Message(b"late", message_id="late"))


async def test_background_replay_of_a_damaged_queue_is_reported_and_sends_raise(
    ns: Namespaces, data_dir: Path, state_dir: Path, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a sender with background recovery over a damaged queue file
    path = tmp_path / "buffer.db"
    damaged_queue(path, "*/orders")
    hooks = ReplayFailures()
    with caplog.at_level(logging.ERROR):
        async with AsyncGeoSender(
            primary="local://primary", secondary="local://secondary", entity="orders",
            data_dir=data_dir, state_dir=state_dir, durable_queue=path, hooks=hooks,
        ) as sender:
            # When the background replay reaches the damaged page
            await wait_for(lambda: bool(hooks.named("on_replay_failed")))
            # Then sends raise QueueCorrupt instead of being buffered behind it
            with pytest.raises(QueueCorrupt):
                await sender.send(Message(b"late", message_id="late"))
    # And the log names the file (once, not once per recovery round)
    lines = [r for r in caplog.records if str(path) in r.getMessage()]
    assert len(lines) == 1
    assert isinstance(hooks.named("on_replay_failed")[0]["error"], QueueCorrupt)


# -- size limits are checked before buffering ------------------------------------------


@pytest.mark.parametrize("mode", ["passive", "active"])
async def test_a_message_too_large_for_the_namespaces_is_rejected_not_buffered(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, tmp_path: Path, mode: str,
) -> None:
    # Given both namespaces down and a durable queue
    with DurableQueue(tmp_path / "buffer.db") as queue:
        sender = make_sender(durable_queue=queue, mode=mode)
        primary.go_down()
        secondary.go_down()
        # When a 10 MB message is sent
        with pytest.raises(MessageRejected) as caught:
            await sender.send(Message(b"x" * (10 << 20), message_id="huge"))
        # Then it is refused at once, naming the limit, and nothing was buffered
        assert "huge" in str(caught.value) and str(1 << 20) in str(caught.value)
        assert queue.count() == 0 and sender.backlog == frozenset()
        # And a message within the limit is still buffered
        assert (await sender.send(Message(b"x" * 1000, message_id="ok"))).buffered


async def test_the_smaller_limit_applies_to_a_destination_of_either_namespace(
    make_sender: SenderFactory, ns: Namespaces, primary: FaultyTransport,
    secondary: FaultyTransport, tmp_path: Path,
) -> None:
    # Given a secondary that takes 256 KB (Service Bus standard), both down
    secondary.max_message_size = 256 * 1024
    with DurableQueue(tmp_path / "buffer.db") as queue:
        sender = make_sender(durable_queue=queue)
        primary.go_down()
        secondary.go_down()
        # When a 300 KB message must be buffered for whichever comes back first
        # Then it is refused: it might only be replayable to the secondary
        with pytest.raises(MessageRejected):
            await sender.send(Message(b"x" * (300 << 10), message_id="big"))
        assert queue.count() == 0


# -- a queue file records which namespaces its messages are for ---------------------


async def test_messages_buffered_for_one_data_dir_are_not_replayed_into_another(
    tmp_path: Path, state_dir: Path,
) -> None:
    # Given messages buffered by a sender on the local namespaces of data dir "drill"
    path = tmp_path / "buffer.db"
    drill, mine = tmp_path / "drill", tmp_path / "mine"
    for where in (drill, mine):
        where.mkdir()
    opts = dict(primary="local://primary", secondary="local://secondary", entity="orders",
                state_dir=state_dir, durable_queue=path, recovery=False)
    async with AsyncGeoSender(data_dir=drill, **opts) as sender:  # type: ignore[arg-type]
        for ns in ("primary", "secondary"):
            sender._namespaces.mark_down(ns, RuntimeError("down for the test"))
        assert (await sender.send(Message(b"a", message_id="a"))).buffered == ("*/orders",)
    # When a sender on the same names in another data dir replays the file
    hooks = ReplayFailures()
    async with AsyncGeoSender(data_dir=mine, hooks=hooks, **opts) as other:  # type: ignore[arg-type]
        with pytest.raises(ConfigError) as caught:
            await other.replay()
        # Then it refuses, naming both, sends nothing, and a send is not buffered behind it
        text = str(caught.value)
        assert str(drill / "primary.db") in text and str(mine / "primary.db") in text
        assert [f["destination"] for f in hooks.named("on_replay_failed")] == ["*/orders"]
        with pytest.raises(ConfigError):
            await other.send(Message(b"b", message_id="b"))
    with DurableQueue(path) as queue:
        assert [m.message.message_id for m in queue.peek()] == ["a"]
    # And the sender it was buffered for replays it
    async with AsyncGeoSender(data_dir=drill, **opts) as sender:  # type: ignore[arg-type]
        assert await sender.replay() == 1


@pytest.mark.parametrize("kind, conn", [
    ("servicebus", "Endpoint=sb://gg-test.servicebus.windows.net/;"
                   "SharedAccessKeyName=Root;SharedAccessKey=SECRET123="),
    ("eventhubs", "Endpoint=sb://gg-test.servicebus.windows.net/;SharedAccessKeyName=Root;"
                  "SharedAccessKey=SECRET123=;EntityPath=orders"),
])
async def test_the_recorded_identity_of_an_azure_namespace_holds_no_key(
    kind: str, conn: str,
) -> None:
    # Given a namespace opened from a connection string with a key
    transport, _ = open_transport(NamespaceConfig.parse(conn, kind=kind))
    try:
        # Then its identity (what a queue file records) is its kind and host only
        assert transport.identity == f"{kind}://gg-test.servicebus.windows.net"
        assert "SECRET123" not in transport.identity
    finally:
        await transport.aclose()


async def test_a_file_from_before_the_record_is_replayed_and_claimed(
    make_sender: SenderFactory, ns: Namespaces, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a queue file written before owners were recorded (no bindings table)
    path = tmp_path / "buffer.db"
    with DurableQueue(path) as queue:
        queue.put("*/orders", Message(b"a", message_id="a"))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE bindings")
    conn.commit()
    conn.close()
    # When a sender replays it
    with DurableQueue(path) as queue, caplog.at_level(logging.WARNING):
        sender = make_sender(durable_queue=queue)
        assert await sender.replay() == 1
        # Then it says it recorded these namespaces as the owner, and did record them
        assert any("did not record" in r.getMessage() for r in caplog.records)
        assert "primary.db" in (queue.binding("*/orders") or "")
    assert await ns.drain_ids("primary") == ["a"]


def test_sync_sender_replay_raises_queue_corrupt(
    ns: Namespaces, data_dir: Path, state_dir: Path, tmp_path: Path,
) -> None:
    # Given a damaged queue file, When the sync GeoSender replays it
    path = tmp_path / "buffer.db"
    damaged_queue(path, "*/orders")
    with GeoSender(primary="local://primary", secondary="local://secondary", entity="orders",
                   data_dir=data_dir, state_dir=state_dir, durable_queue=path,
                   recovery=False) as sender:
        # Then QueueCorrupt reaches the caller through the sync driver too
        with pytest.raises(QueueCorrupt):
            sender.replay()
        with pytest.raises(QueueCorrupt):
            sender.send(Message(b"late", message_id="late"))


def test_sync_replay_from_threads_while_recovery_runs_sends_each_message_once(
    ns: Namespaces, data_dir: Path, state_dir: Path, tmp_path: Path,
) -> None:
    # Given 2,000 messages buffered for the queue, and slow namespaces (each send 20 ms)
    path = tmp_path / "buffer.db"
    with DurableQueue(path) as queue:
        for start in range(0, 2_000, 500):
            queue.put_many("*/orders", [Message(b"x", message_id=f"m{i}")
                                        for i in range(start, start + 500)])
    ns.primary.set_faults(latency=0.02)
    ns.secondary.set_faults(latency=0.02)
    with GeoSender(primary="local://primary", secondary="local://secondary", entity="orders",
                   data_dir=data_dir, state_dir=state_dir, durable_queue=path) as sender:
        # When the background recovery is draining and three threads call replay() too
        deadline = time.monotonic() + 30
        while ns.count("primary") == 0:
            assert time.monotonic() < deadline, "the background recovery did not start"
            time.sleep(0.005)
        errors: list[BaseException] = []

        def replay() -> None:
            try:
                sender.replay()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=replay) for _ in range(3)]
        for t in threads:
            t.start()
        assert ns.count("primary") < 2_000, "the recovery ended before replay() was called"
        for t in threads:
            t.join(60)
        while sender.backlog:
            assert time.monotonic() < deadline + 60, sender.backlog
            time.sleep(0.01)
    ns.primary.set_faults()
    ns.secondary.set_faults()
    # Then no call failed, and every id was delivered exactly once, in order
    assert errors == []
    delivered = anyio.run(ns.drain_ids, "primary") + anyio.run(ns.drain_ids, "secondary")
    assert Counter(delivered).most_common(1)[0][1] == 1, "an id was delivered twice"
    assert delivered == [f"m{i}" for i in range(2_000)]
class SwallowsCancel(FaultyTransport):
    """A probe that turns its cancellation into a transport error, as an SDK's connect
    can when it is cancelled halfway through opening a socket."""

    probing = 0
    swallowed = 0

    async def probe(self) -> None:
        self.probing += 1
        try:
            await anyio.sleep(3600)
        except BaseException as exc:
            self.swallowed += 1
            raise NamespaceUnavailable("probe cancelled", namespace="primary") from exc


async def test_close_ends_a_recovery_round_whose_probe_swallows_the_cancellation(
    make_sender: SenderFactory, primary: FaultyTransport, secondary: FaultyTransport,
) -> None:
    # Given a sender whose background recovery is probing a namespace marked down,
    # through a probe that swallows cancellation
    primary.__class__ = SwallowsCancel
    sender = make_sender(recovery=True)
    await sender.start()
    sender._namespaces.mark_down("primary", NamespaceUnavailable("down", namespace="primary"))
    await wait_for(lambda: getattr(primary, "probing", 0) > 0)
    task = sender._task
    assert task is not None
    # When it is closed (bounded: the bug made it wait until cancelled again)
    with anyio.move_on_after(5):
        await sender.aclose()
    # Then the recovery task ended after the one cancellation close() sent: it once
    # kept looping, probing again, and close() waited for it until cancelled again
    assert task.done()
    assert primary.swallowed == 1, f"probed {primary.probing} times after close"
