"""GeoSender / GeoReceiver: the sync drivers over the async core (an anyio portal)."""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway import (
    ConfigError,
    GeoReceiver,
    GeoSender,
    Message,
    NamespaceConfig,
    ReplicationPolicy,
    RetryPolicy,
)
from gateway.aio import AsyncGeoSender
from replication import DeadlinePolicy
from tests.gateway.conftest import ENTITY, Namespaces, wait_for_sync

SECRET = "SECRET123="
CONNECTION_STRING = (
    "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;"
    f"SharedAccessKey={SECRET}"
)
FAST = ReplicationPolicy(probe_interval=0.05,
                         retry=RetryPolicy(initial_backoff=0.001, max_backoff=0.005))


@pytest.fixture
def sender_kw(data_dir: Path, state_dir: Path, ns: Namespaces) -> dict[str, Any]:
    return {"primary": "local://primary", "secondary": "local://secondary", "entity": ENTITY,
            "data_dir": data_dir, "state_dir": state_dir, "policy": FAST}


@pytest.fixture
def receiver_kw(data_dir: Path, tmp_path: Path, ns: Namespaces) -> dict[str, Any]:
    return {"primary": "local://primary", "secondary": "local://secondary", "entity": ENTITY,
            "data_dir": data_dir, "dedup_store": tmp_path / "dedup.db", "poll_wait": 0.05}


def test_send_and_failover(sender_kw: dict[str, Any], receiver_kw: dict[str, Any],
                           ns: Namespaces) -> None:
    # Given a sync sender used as a context manager
    with GeoSender(**sender_kw) as sender:
        # When it sends, Then the primary takes it
        first = sender.send(Message("a", message_id="m1"))
        assert first.namespaces == ("primary",)
        # When the primary goes down, Then the next send fails over
        ns.primary.down()
        second = sender.send_batch([Message("b", message_id="m2")])
        assert second.namespaces == ("secondary",) and second.failed_over
        assert sender.roles.active == "secondary"
    # And a sync receiver gets both, one from each namespace
    ns.primary.up()
    with GeoReceiver(**receiver_kw) as receiver:
        got = []
        for _ in range(50):
            for r in receiver.receive(max_messages=10, max_wait=0.2):
                got.append((r.message_id, r.namespace))
                receiver.complete(r)
            if len(got) == 2:
                break
        assert sorted(got) == [("m1", "primary"), ("m2", "secondary")]
        assert receiver.stats.completed == 2
    assert ns.count("primary") == ns.count("secondary") == 0


def test_buffer_then_background_replay(
    sender_kw: dict[str, Any], ns: Namespaces, tmp_path: Path
) -> None:
    # Given a sync sender with a durable queue and both namespaces down
    with GeoSender(**sender_kw, durable_queue=tmp_path / "buffer.db") as sender:
        ns.primary.down()
        ns.secondary.down()
        results = [sender.send(Message(str(i), message_id=f"m{i}")) for i in range(3)]
        assert all(r.buffered == ("*/orders",) for r in results)
        assert sender.backlog == frozenset({"*/orders"})
        # When the namespaces come back and nobody calls the sender
        ns.primary.up()
        ns.secondary.up()
        # Then its background recovery replays the backlog on its own loop thread
        wait_for_sync(lambda: sender.backlog == frozenset(), within=15)
        assert sender.replay() == 0  # nothing left
    assert anyio.run(ns.drain_ids, "primary") == ["m0", "m1", "m2"]


def test_receive_abandon_and_run_with_idle_timeout(
    sender_kw: dict[str, Any], receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given three messages sent in active mode (a copy in each namespace; deadlines a
    # loaded machine does not reach: what is tested here is the receiving)
    ids = ["m0", "m1", "m2"]
    patient = dataclasses.replace(FAST, deadlines=DeadlinePolicy(floor=5.0, ceiling=10.0,
                                                                 initial=10.0))
    with GeoSender(**{**sender_kw, "policy": patient}, mode="active") as sender:
        for i in ids:
            assert sorted(sender.send(Message(i, message_id=i)).namespaces) == [
                "primary", "secondary"]
    calls: list[str] = []

    def handler(message: Any) -> None:
        calls.append(message.message_id)
        if calls.count("m1") == 1 and message.message_id == "m1":
            raise RuntimeError("fails once")

    with GeoReceiver(**receiver_kw) as receiver:
        # When a message is received and abandoned, Then it comes back
        [first] = receiver.receive(max_messages=1, max_wait=5)
        receiver.abandon(first)
        # When run() handles until idle with a handler that fails once on m1
        receiver.run(handler, idle_timeout=1.0)
        # Then every id was handled, m1 twice, and every copy was settled
        assert sorted(set(calls)) == ids
        assert calls.count("m1") == 2 and calls.count("m0") == calls.count("m2") == 1
        stats = receiver.stats
        assert stats.completed == 3 and stats.duplicates_suppressed == 3
    assert ns.count("primary") == ns.count("secondary") == 0


def test_close_twice_and_calls_after_close(
    sender_kw: dict[str, Any], receiver_kw: dict[str, Any]
) -> None:
    # Given a closed sender and receiver
    sender = GeoSender(**sender_kw)
    receiver = GeoReceiver(**receiver_kw)
    sender.close()
    receiver.close()
    # When they are closed again, Then nothing happens
    sender.close()
    receiver.close()
    # When they are used after close, Then RuntimeError is raised
    with pytest.raises(RuntimeError, match="closed"):
        sender.send(Message("a"))
    with pytest.raises(RuntimeError, match="closed"):
        sender.send_batch([Message("a")])
    with pytest.raises(RuntimeError, match="closed"):
        sender.replay()
    with pytest.raises(RuntimeError, match="closed"):
        receiver.receive(max_wait=0.1)
    with pytest.raises(RuntimeError, match="closed"):
        receiver.run(lambda m: None, idle_timeout=0.1)


def test_context_manager_exit_closes(sender_kw: dict[str, Any]) -> None:
    with GeoSender(**sender_kw) as sender:
        pass
    with pytest.raises(RuntimeError):
        sender.send(Message("a"))


def test_bad_arguments_raise_and_leave_no_portal_behind(sender_kw: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        GeoSender(**sender_kw, no_such_option=1)
    with pytest.raises(ConfigError):
        GeoSender(**{**sender_kw, "mode": "sideways"})


def _no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text
        assert "SECRET123" not in text


def test_secrets_never_appear_in_reprs_or_errors(
    sender_kw: dict[str, Any], state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a namespace config with a connection string
    config = NamespaceConfig(connection_string=CONNECTION_STRING)
    # Then its repr and str hide the key
    _no_secret(repr(config), str(config))
    # When a connection string without an endpoint is given (sync and async)
    broken = f"SharedAccessKeyName=k;SharedAccessKey={SECRET}"
    with pytest.raises(ConfigError) as info0:
        NamespaceConfig(connection_string=broken)
    _no_secret(str(info0.value), "".join(traceback.format_exception(info0.value)))
    for role in ("primary", "secondary"):
        kw = {**sender_kw, role: f"ftp://user:{SECRET}@x.servicebus.windows.net"}
        with pytest.raises(ConfigError) as info:
            GeoSender(**kw)
        # Then ConfigError is raised and neither its message nor its traceback has the key
        _no_secret(str(info.value), repr(info.value),
                   "".join(traceback.format_exception(info.value)))
        with pytest.raises(ConfigError) as info2:
            AsyncGeoSender(**kw)
        _no_secret(str(info2.value), repr(info2.value))
    # When an unreachable Azure namespace is the primary (nothing listens on port 1)
    unreachable = NamespaceConfig(connection_string=(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;"
        f"SharedAccessKey={SECRET};UseDevelopmentEmulator=true"))
    caplog.set_level("DEBUG")
    with GeoSender(**{**sender_kw, "primary": unreachable}) as sender:
        result = sender.send(Message("a"))
        # Then the send fails over to the secondary, and no repr or log line has the key
        assert result.namespaces == ("secondary",)
        _no_secret(repr(sender), str(sender), repr(sender.roles), repr(result))
    assert "failover" in caplog.text
    _no_secret(caplog.text)


def test_sender_repr_with_a_secret_bearing_local_config(sender_kw: dict[str, Any]) -> None:
    # Given a local namespace config that also carries a connection string
    config = NamespaceConfig(url="local://primary", connection_string=CONNECTION_STRING)
    _no_secret(repr(config), str(config))
    # When a sender is opened with it, Then its repr and str do not show the key
    with GeoSender(**{**sender_kw, "primary": config}) as sender:
        assert sender.send(Message("a")).namespaces == ("primary",)
        _no_secret(repr(sender), str(sender), repr(sender.roles))


def test_a_sender_never_closed_does_not_hang_the_interpreter_at_exit(tmp_path):
    import subprocess
    import sys
    import textwrap

    # Given a program that sends and forgets to close its GeoSender
    script = textwrap.dedent(
        f"""
        from gateway import GeoSender
        s = GeoSender(primary="local://primary", secondary="local://secondary",
                      entity="q", data_dir={str(tmp_path)!r}, state_dir={str(tmp_path)!r})
        s.send(b"x")
        print("sent")
        """
    )
    # When it ends / Then it exits promptly and cleanly, the message sent
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "sent" in done.stdout


def _record_send_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from gateway.transports.local._store import Store

    threads: list[str] = []
    original = Store.send

    def send(self: Store, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Store, "send", send)
    return threads


def test_local_sends_of_a_sync_sender_run_off_its_loop_thread(
    sender_kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the local namespaces' SQLite send, watched for the thread it runs in
    threads = _record_send_threads(monkeypatch)
    # When a sync sender sends
    with GeoSender(**sender_kw) as sender:
        sender.send(Message("a", message_id="m1"))
    # Then the SQLite work ran in a worker thread, not on the sender's loop thread (a
    # locked file would stop the loop and the deadlines that hedge: issue 22)
    assert threads and threads[0] not in ("geogateway-GeoSender", "MainThread")
    # And so it does for an async sender on an ordinary loop
    del threads[:]

    async def main() -> None:
        async with AsyncGeoSender(**sender_kw) as sender:
            await sender.send(Message("b", message_id="m2"))

    anyio.run(main)
    assert threads and threads[0] not in ("geogateway-GeoSender", "MainThread")


@pytest.mark.parametrize("mode", ["passive", "active"])
def test_many_caller_threads_share_one_sender(
    sender_kw: dict[str, Any], ns: Namespaces, mode: str
) -> None:
    # Given one sync sender shared by 8 threads
    errors: list[BaseException] = []
    with GeoSender(**sender_kw, mode=mode) as sender:

        def work(t: int) -> None:
            try:
                for i in range(25):
                    result = sender.send(Message(f"{t}-{i}", message_id=f"t{t}-{i:02d}"))
                    assert "primary" in result.namespaces
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        # When they all send at once
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    # Then every message landed exactly once, in each thread's own order
    assert errors == []
    want = sorted(f"t{t}-{i:02d}" for t in range(8) for i in range(25))
    names = ["primary", "secondary"] if mode == "active" else ["primary"]
    for name in names:
        got = anyio.run(ns.drain_ids, name)
        assert sorted(got) == want
        for t in range(8):
            mine = [m for m in got if m.startswith(f"t{t}-")]
            assert mine == sorted(mine)


def test_an_error_reaches_the_caller_and_the_sender_stays_usable(
    sender_kw: dict[str, Any], ns: Namespaces
) -> None:
    from gateway import MessageRejected

    # Given a sync sender to a queue that takes messages of 100 bytes at most
    for name in ("primary", "secondary"):
        ns[name].create_queue("small", max_message_size=100)
    with GeoSender(**{**sender_kw, "entity": "small"}) as sender:
        # When a send is rejected, Then the caller gets the core's own exception type
        with pytest.raises(MessageRejected, match="limit"):
            sender.send(Message(b"x" * 200))
        # And the next calls still work (the handoff is not stuck)
        with pytest.raises(MessageRejected, match="limit"):
            sender.send_batch([Message(b"y" * 200)])
        assert sender.send(Message(b"z", message_id="ok")).namespaces == ("primary",)
    assert anyio.run(ns.drain_ids, "primary", "small") == ["ok"]


def test_close_stops_the_loop_thread(sender_kw: dict[str, Any],
                                     receiver_kw: dict[str, Any]) -> None:
    # Given a sync sender and receiver, each with its loop thread
    sender, receiver = GeoSender(**sender_kw), GeoReceiver(**receiver_kw)
    sender.send(Message("a"))
    receiver.receive(max_wait=0.05)
    names = [t.name for t in threading.enumerate()]
    assert "geogateway-GeoSender" in names and "geogateway-GeoReceiver" in names
    # When they are closed, Then their threads are gone
    sender.close()
    receiver.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("geogateway-Geo")]


def test_a_call_in_flight_when_another_thread_closes_gets_an_error_not_a_hang(
    receiver_kw: dict[str, Any]
) -> None:
    # Given a receiver whose receive() is waiting in another thread (an empty queue)
    receiver = GeoReceiver(**receiver_kw)
    outcome: list[BaseException | list[Any]] = []

    def wait() -> None:
        try:
            outcome.append(receiver.receive(max_messages=1, max_wait=30))
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.3)
    # When this thread closes the receiver
    receiver.close()
    # Then the waiting call ends promptly with an error saying so
    waiter.join(timeout=10)
    assert not waiter.is_alive(), "the call in flight was left blocked"
    [error] = outcome
    assert isinstance(error, RuntimeError) and "closed" in str(error)


def _count_crossings(receiver: GeoReceiver) -> list[str]:
    """Record each hand-over from this thread to the receiver's loop."""
    me = threading.current_thread()
    loop = receiver._loop_thread.loop
    crossings: list[str] = []
    original = loop.call_soon_threadsafe

    def call_soon_threadsafe(callback: Any, *args: Any, **kw: Any) -> Any:
        if threading.current_thread() is me:
            crossings.append(getattr(callback, "__qualname__", repr(callback)))
        return original(callback, *args, **kw)

    loop.call_soon_threadsafe = call_soon_threadsafe  # type: ignore[method-assign]
    return crossings


def _count_batches(receiver: GeoReceiver) -> list[int]:
    """The sizes of the batches the receiver's core delivered."""
    sizes: list[int] = []
    core = receiver._core
    receive = core.receive

    async def counted(*args: Any, **kw: Any) -> Any:
        got = await receive(*args, **kw)
        if got:
            sizes.append(len(got))
        return got

    core.receive = counted  # type: ignore[method-assign]
    return sizes


def test_run_calls_a_plain_handler_in_the_callers_thread_a_batch_per_crossing(
    receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given 300 messages in both namespaces
    ids = [f"m{i:03d}" for i in range(300)]
    for name in ("primary", "secondary"):
        anyio.run(lambda n=name: ns.put(n, *(Message("x", message_id=i) for i in ids)))
    threads: set[str] = set()
    with GeoReceiver(**receiver_kw) as receiver:
        crossings = _count_crossings(receiver)
        batches = _count_batches(receiver)

        def handler(message: Any) -> None:
            threads.add(threading.current_thread().name)

        class AllDone:
            def is_set(self) -> bool:
                stats = receiver.stats
                return stats.completed == stats.duplicates_suppressed == 300

        # When run() handles them with a plain handler, up to 100 per receive
        receiver.run(handler, max_messages=100, stop=AllDone(), idle_timeout=30)
        stats = receiver.stats
    # Then the handler ran in this thread, the caller's
    assert threads == {threading.current_thread().name}
    # And this thread handed results back to the loop a few times per batch, not once
    # per message
    assert len(crossings) <= 3 * len(batches) + 2, (len(crossings), batches)
    # And every id was completed once, every second copy settled as a duplicate (but
    # those whose settlement timed out on a busy machine: they come back, are counted)
    assert (stats.completed, stats.duplicates_suppressed, stats.abandoned) == (300, 300, 0)
    assert ns.count("primary") + ns.count("secondary") == stats.unsettled


def test_receive_and_complete_cross_a_few_times_per_batch_and_settle_before_returning(
    receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given 300 messages in the primary
    anyio.run(lambda: ns.put("primary", *(Message("x", message_id=f"m{i:03d}")
                                          for i in range(300))))
    with GeoReceiver(**receiver_kw) as receiver:
        crossings = _count_crossings(receiver)
        batches = 0
        done = 0
        # When the caller receives up to 100 at a time and completes each
        while done < 300:
            got = receiver.receive(max_messages=100, max_wait=5)
            batches += 1
            for received in got:
                receiver.complete(received)
            done += len(got)
            # Then once the last message out is completed, every one is settled (or its
            # settlement timed out on a busy machine, and is counted)
            stats = receiver.stats
            assert ns.count("primary") == 300 - done + stats.unsettled
            assert stats.completed == done
    # And the completions crossed to the loop a few times per batch, not once each
    assert len(crossings) <= 4 * batches, (len(crossings), batches, crossings[:10])


def test_a_completion_queued_while_other_messages_are_held_is_settled_soon(
    receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given two messages received together
    anyio.run(lambda: ns.put("primary", Message("a", message_id="m1"),
                             Message("b", message_id="m2")))
    with GeoReceiver(**receiver_kw) as receiver:
        got: list[Any] = []
        while len(got) < 2:
            got += receiver.receive(max_messages=2, max_wait=5)
        first, second = got
        # When the first is completed while the second is still held (no more calls)
        receiver.complete(first)
        assert receiver.stats.completed == 1
        # Then the first is marked done and settled within moments all the same
        wait_for_sync(lambda: ns.count("primary") == 1, within=5)
        receiver.complete(second)
        assert ns.count("primary") == 0


def test_ctrl_c_in_a_plain_handler_ends_run_and_reaches_the_caller(
    receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given three messages and a handler that is interrupted (Ctrl-C) on the second
    anyio.run(lambda: ns.put("primary", *(Message("x", message_id=f"m{i}")
                                          for i in range(3))))
    calls: list[str] = []

    def handler(message: Any) -> None:
        calls.append(message.message_id)
        if len(calls) == 2:
            raise KeyboardInterrupt

    outcome: list[BaseException | None] = []
    receiver = GeoReceiver(**receiver_kw)

    def run() -> None:
        try:
            receiver.run(handler, max_messages=3, idle_timeout=5)
            outcome.append(None)
        except BaseException as exc:  # recorded for the assertion below
            outcome.append(exc)

    # When run() is called (in a thread of its own, to see a hang as one)
    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(timeout=30)
    # Then the interrupt reached run()'s caller promptly
    assert not caller.is_alive(), "run() hung after the interrupt"
    [error] = outcome
    assert isinstance(error, KeyboardInterrupt)
    # And the message handled before it was completed; the receiver still closes
    assert receiver.stats.completed == 1
    receiver.close()



def test_completing_a_held_message_after_close_says_the_receiver_is_closed(
    receiver_kw: dict[str, Any], ns: Namespaces
) -> None:
    # Given two messages received, then the receiver closed
    anyio.run(lambda: ns.put("primary", Message("a", message_id="m1"),
                             Message("b", message_id="m2")))
    receiver = GeoReceiver(**receiver_kw)
    got: list[Any] = []
    while len(got) < 2:
        got += receiver.receive(max_messages=2, max_wait=5)
    receiver.close()
    # When one is completed, Then the error says so (and nothing was counted)
    with pytest.raises(RuntimeError, match="this GeoReceiver is closed"):
        receiver.complete(got[0])
    assert receiver.stats.completed == 0
