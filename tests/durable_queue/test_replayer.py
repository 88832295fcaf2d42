"""The replayer: leases, order, rejection, transport failures, sync and async drivers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from durable_queue import DurableQueue, Replayer, ReplayResult
from replication import (
    ConfigError,
    DurableQueueError,
    Message,
    MessageRejected,
    NamespaceUnavailable,
)

from .conftest import msg


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """A send() that records what arrived and fails on demand."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.reject: set[str] = set()
        self.fail_on_call: int | None = None
        self.calls = 0

    @property
    def delivered(self) -> list[str]:
        return [m for batch in self.batches for m in batch]

    def __call__(self, batch: Sequence[Message]) -> None:
        self.calls += 1
        if self.fail_on_call == self.calls:
            raise NamespaceUnavailable("primary is down", namespace="primary")
        names = [m.message_id for m in batch]
        bad = self.reject.intersection(names)
        if bad:
            raise MessageRejected(f"{sorted(bad)[0]} is too large")
        self.batches.append(names)


@pytest.fixture
def filled(queue: DurableQueue) -> DurableQueue:
    queue.put_many("a", [msg(f"m{i}") for i in range(10)])
    queue.put("b", msg("other"))
    return queue


def test_drain_sends_in_order_and_acks(filled: DurableQueue) -> None:
    sink = Sink()
    seen: list[int] = []
    result = Replayer(filled, "a", batch_size=3).drain(sink, progress=seen.append)
    assert isinstance(result, ReplayResult)
    assert sink.delivered == [f"m{i}" for i in range(10)]
    assert [len(b) for b in sink.batches] == [3, 3, 3, 1]
    assert seen == [3, 6, 9, 10]
    assert (result.replayed, result.dead_lettered, result.remaining) == (10, 0, 0)
    assert result.stopped_by is None and result.seconds >= 0
    assert filled.destinations() == ["b"]  # the other destination is untouched


def test_max_messages_stops_early(filled: DurableQueue) -> None:
    sink = Sink()
    result = Replayer(filled, "a", batch_size=4).drain(sink, max_messages=6)
    assert sink.delivered == [f"m{i}" for i in range(6)]
    assert (result.replayed, result.remaining) == (6, 4)


def test_rejected_message_is_dead_lettered_and_the_rest_flows(filled: DurableQueue) -> None:
    sink = Sink()
    sink.reject = {"m4"}
    result = Replayer(filled, "a", batch_size=3).drain(sink)
    assert sink.delivered == [f"m{i}" for i in range(10) if i != 4]
    assert (result.replayed, result.dead_lettered, result.remaining) == (9, 1, 0)
    [dead] = filled.dead_letters("a")
    assert dead.message.message_id == "m4" and "too large" in dead.reason


def test_transport_error_stops_and_keeps_order(filled: DurableQueue) -> None:
    sink = Sink()
    sink.fail_on_call = 2
    result = Replayer(filled, "a", batch_size=3).drain(sink)
    assert isinstance(result.stopped_by, NamespaceUnavailable)
    assert sink.delivered == ["m0", "m1", "m2"]
    assert (result.replayed, result.remaining) == (3, 7)
    head = filled.get_batch("a", 4)
    assert [s.message.message_id for s in head] == ["m3", "m4", "m5", "m6"]
    assert [s.attempts for s in head] == [1, 1, 1, 0]
    # When the namespace is back, the drain resumes where it stopped
    sink.fail_on_call = None
    Replayer(filled, "a", batch_size=3).drain(sink)
    assert sink.delivered == [f"m{i}" for i in range(10)]


def test_transport_error_while_isolating_a_rejection(filled: DurableQueue) -> None:
    sink = Sink()
    sink.reject = {"m1"}
    sink.fail_on_call = 4  # batch, m0 alone, m1 alone (rejected), then m2 fails
    result = Replayer(filled, "a", batch_size=3).drain(sink)
    assert isinstance(result.stopped_by, NamespaceUnavailable)
    assert (result.replayed, result.dead_lettered) == (1, 1)
    assert [s.message.message_id for s in filled.get_batch("a", 2)] == ["m2", "m3"]


def test_other_errors_put_the_batch_back_and_propagate(filled: DurableQueue) -> None:
    def broken(batch: Sequence[Message]) -> None:
        raise RuntimeError("bug in send")

    with pytest.raises(RuntimeError, match="bug in send"):
        Replayer(filled, "a").drain(broken)
    head = filled.get_batch("a", 1)[0]
    assert head.message.message_id == "m0" and head.attempts == 1
    assert len(filled) == 11
    # the lease was given back
    assert filled.lease_owner("a", now=0) is None


def test_lease_is_exclusive(filled: DurableQueue) -> None:
    clock = Clock()
    first = Replayer(filled, "a", owner="one", clock=clock)
    second = Replayer(filled, "a", owner="two", clock=clock)
    assert first.acquire()
    assert not second.acquire()
    busy = pytest.raises(DurableQueueError, match="another replayer \\(one\\) is draining 'a'")
    with busy, second:
        pass
    with pytest.raises(DurableQueueError, match="another replayer"):
        second.drain(Sink())
    assert Replayer(filled, "b", owner="two", clock=clock).acquire()  # per destination
    first.release()
    with second:
        assert second.drain(Sink()).replayed == 10


def test_expired_lease_is_taken_over_from_the_head(filled: DurableQueue) -> None:
    clock = Clock()
    crashed = Replayer(filled, "a", owner="crashed", lease_seconds=30, batch_size=4, clock=clock)
    assert crashed.acquire()
    # Given a replayer that read a batch and died before settling it
    assert len(crashed.next_batch()) == 4
    successor = Replayer(filled, "a", owner="next", lease_seconds=30, clock=clock)
    clock.now += 29
    assert not successor.acquire()
    # When its lease expires, the next replayer takes over from the head
    clock.now += 2
    sink = Sink()
    with successor:
        result = successor.drain(sink)
    assert sink.delivered == [f"m{i}" for i in range(10)]  # at-least-once, in order
    assert result.replayed == 10


def test_lease_is_renewed_while_draining(filled: DurableQueue) -> None:
    clock = Clock()
    replayer = Replayer(filled, "a", owner="slow", lease_seconds=30, batch_size=1, clock=clock)
    rival = Replayer(filled, "a", owner="rival", lease_seconds=30, clock=clock)

    def slow_send(batch: Sequence[Message]) -> None:
        clock.now += 12  # 10 batches: 120 s, four lease lengths
        assert not rival.acquire()

    result = replayer.drain(slow_send)
    assert result.replayed == 10 and result.stopped_by is None


def test_lost_lease_stops_the_drain(filled: DurableQueue) -> None:
    clock = Clock()
    replayer = Replayer(filled, "a", owner="slow", lease_seconds=30, batch_size=2, clock=clock)
    thief = Replayer(filled, "a", owner="thief", lease_seconds=30, clock=clock)

    def stalled_send(batch: Sequence[Message]) -> None:
        clock.now += 31
        assert thief.acquire()

    result = replayer.drain(stalled_send)
    assert isinstance(result.stopped_by, DurableQueueError)
    assert "lost its lease" in str(result.stopped_by)
    assert result.replayed == 2 and result.remaining == 8
    assert filled.lease_owner("a", now=clock.now) == "thief"


@pytest.mark.anyio
async def test_async_drain_shares_the_semantics(filled: DurableQueue) -> None:
    sink = Sink()
    sink.reject = {"m7"}

    async def send(batch: Sequence[Message]) -> None:
        sink(batch)

    result = await Replayer(filled, "a", batch_size=4).adrain(send)
    assert sink.delivered == [f"m{i}" for i in range(10) if i != 7]
    assert (result.replayed, result.dead_lettered, result.remaining) == (9, 1, 0)


@pytest.mark.anyio
async def test_async_drain_stops_on_transport_error(filled: DurableQueue) -> None:
    sink = Sink()
    sink.fail_on_call = 1

    async def send(batch: Sequence[Message]) -> None:
        sink(batch)

    result = await Replayer(filled, "a").adrain(send)
    assert isinstance(result.stopped_by, NamespaceUnavailable)
    assert result.replayed == 0 and result.remaining == 10


@pytest.mark.parametrize(
    "kwargs", [{"lease_seconds": 0}, {"batch_size": 0}, {"batch_size": 1.5}, {"lease_seconds": "x"}]
)
def test_bad_replayer_options(queue: DurableQueue, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Replayer(queue, "a", **kwargs)  # type: ignore[arg-type]
