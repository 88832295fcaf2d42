"""The de-duplication policy over the in-memory store, with an injected clock."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication import ConfigError
from replication._dedup import (
    Deduplicator,
    DedupStats,
    DedupStore,
    DedupWindow,
    InMemoryDedupStore,
    Verdict,
)
from tests.conftest import FakeClock

DELIVER, DUPLICATE, HOLD = Verdict.DELIVER, Verdict.DUPLICATE, Verdict.HOLD


@pytest.fixture
def store() -> Iterator[InMemoryDedupStore]:
    store = InMemoryDedupStore(window=DedupWindow(seconds=60, count=100))
    yield store
    store.close()


@pytest.fixture
def dedup(store: InMemoryDedupStore, clock: FakeClock) -> Deduplicator:
    return Deduplicator(store, lease=10, clock=clock)


def test_first_copy_delivered_second_held_then_duplicate(dedup: Deduplicator) -> None:
    # Given the first copy was delivered
    assert dedup.check("m1") is DELIVER
    # When the second copy arrives while the first is in flight, Then it is held
    assert dedup.check("m1") is HOLD
    assert not dedup.is_done("m1")
    # When the handler succeeds, Then the second copy is a duplicate
    dedup.succeeded("m1")
    assert dedup.check("m1") is DUPLICATE
    assert dedup.is_done("m1")


def test_failed_handler_releases_the_other_copy(dedup: Deduplicator) -> None:
    assert dedup.check("m1") is DELIVER
    dedup.failed("m1")
    assert not dedup.is_done("m1")
    assert dedup.check("m1") is DELIVER


def test_duplicate_after_restart_comes_from_the_store(
    store: InMemoryDedupStore, clock: FakeClock
) -> None:
    # Given one deduplicator marked m1 done
    first = Deduplicator(store, clock=clock)
    assert first.check("m1") is DELIVER
    first.succeeded("m1")
    # When a fresh one (empty front, another owner) uses the same store
    second = Deduplicator(store, clock=clock)
    # Then m1 is still a duplicate
    assert second.check("m1") is DUPLICATE
    assert second.is_done("m1")


def test_claim_by_another_owner_is_held_until_its_lease_expires(
    store: InMemoryDedupStore, clock: FakeClock
) -> None:
    # Given a holder that claimed m1 and then crashed (never finished)
    crashed = Deduplicator(store, lease=10, clock=clock)
    other = Deduplicator(store, lease=10, clock=clock)
    assert crashed.check("m1") is DELIVER
    # Then the other copy is held while the lease runs
    clock.advance(9.9)
    assert other.check("m1") is HOLD
    # And delivered once it ran out
    clock.advance(0.2)
    assert other.check("m1") is DELIVER
    other.succeeded("m1")
    assert crashed.check("m1") is DUPLICATE


def test_own_overrun_lease_no_longer_short_circuits(dedup: Deduplicator, clock: FakeClock) -> None:
    assert dedup.check("m1") is DELIVER
    clock.advance(11)
    assert dedup.check("m1") is DELIVER


def test_failed_by_a_stale_owner_does_not_release_a_new_claim(
    store: InMemoryDedupStore, clock: FakeClock
) -> None:
    slow = Deduplicator(store, lease=10, clock=clock)
    fast = Deduplicator(store, lease=10, clock=clock)
    assert slow.check("m1") is DELIVER
    clock.advance(11)
    assert fast.check("m1") is DELIVER
    # When the overrun holder reports failure, the new claim stays
    slow.failed("m1")
    assert slow.check("m1") is HOLD


def test_time_window_expiry(dedup: Deduplicator, clock: FakeClock) -> None:
    assert dedup.check("m1") is DELIVER
    dedup.succeeded("m1")
    clock.advance(59.9)
    assert dedup.check("m1") is DUPLICATE
    clock.advance(0.2)
    assert not dedup.is_done("m1")
    assert dedup.check("m1") is DELIVER
    assert dedup.stats.window_size == 0


def test_count_window_evicts_oldest(clock: FakeClock) -> None:
    store = InMemoryDedupStore(window=DedupWindow(seconds=600, count=3))
    dedup = Deduplicator(store, clock=clock)
    for mid in ["a", "b", "c", "d"]:
        assert dedup.check(mid) is DELIVER
        dedup.succeeded(mid)
        clock.advance(1)
    assert dedup.stats.window_size == 3
    assert len(store.done) == 3
    assert dedup.check_many(["b", "c", "d"]) == [DUPLICATE] * 3
    assert dedup.check("a") is DELIVER


def test_count_window_also_bounds_a_fresh_front(
    store: InMemoryDedupStore, clock: FakeClock
) -> None:
    # The store evicts by count at prune time even for ids this front never saw.
    other = Deduplicator(store, clock=clock)
    ids = [f"id{i}" for i in range(150)]
    assert other.check_many(ids) == [DELIVER] * 150
    other.succeeded_many(ids)
    assert len(store.done) == 100
    fresh = Deduplicator(store, clock=clock)
    assert fresh.check("id0") is DELIVER
    assert fresh.check("id149") is DUPLICATE


def test_check_many_mixes_verdicts_in_order(dedup: Deduplicator) -> None:
    assert dedup.check_many(["a", "b"]) == [DELIVER, DELIVER]
    dedup.succeeded("a")
    got = dedup.check_many(["a", "b", "c", "c", "a", "d"])
    assert got == [DUPLICATE, HOLD, DELIVER, HOLD, DUPLICATE, DELIVER]
    assert dedup.check_many([]) == []


class CountingStore(InMemoryDedupStore):
    def __init__(self) -> None:
        super().__init__()
        self.claims_calls: list[list[str]] = []

    def claim(
        self, message_ids: Sequence[str], *, owner: str, now: float, lease: float
    ) -> list[Verdict]:
        self.claims_calls.append(list(message_ids))
        return super().claim(message_ids, owner=owner, now=now, lease=lease)


def test_check_many_is_one_round_trip_and_front_short_circuits(clock: FakeClock) -> None:
    store = CountingStore()
    dedup = Deduplicator(store, clock=clock)
    dedup.check_many(["a", "b", "c"])
    assert store.claims_calls == [["a", "b", "c"]]
    dedup.succeeded("a")
    # Done here and in flight here: answered from memory, no store call.
    assert dedup.check_many(["a", "b"]) == [DUPLICATE, HOLD]
    assert store.claims_calls == [["a", "b", "c"]]


def test_stats(dedup: Deduplicator) -> None:
    dedup.check_many(["a", "a", "b"])
    dedup.succeeded("a")
    dedup.check("a")
    assert dedup.stats == DedupStats(checks=4, delivered=2, duplicates=1, held=1, window_size=1)


def test_close_releases_in_flight_claims(store: InMemoryDedupStore, clock: FakeClock) -> None:
    first = Deduplicator(store, clock=clock)
    assert first.check("m1") is DELIVER
    store_closed_before = store.closed
    first.close()
    assert store.closed and not store_closed_before
    assert store.claims == {}


@pytest.mark.parametrize(
    "kwargs", [{"seconds": 0}, {"seconds": -1.0}, {"count": 0}, {"count": 1.5}, {"seconds": "1"}]
)
def test_window_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DedupWindow(**kwargs)  # type: ignore[arg-type]


def test_deduplicator_rejects_conflicting_window_and_bad_lease(store: InMemoryDedupStore) -> None:
    with pytest.raises(ConfigError, match="differs"):
        Deduplicator(store, window=DedupWindow(seconds=5))
    with pytest.raises(ConfigError, match="lease"):
        Deduplicator(store, lease=0)
    assert Deduplicator(store, window=DedupWindow(seconds=60, count=100)).window == store.window


def test_in_memory_store_is_a_dedup_store() -> None:
    assert isinstance(InMemoryDedupStore(), DedupStore)
    assert not isinstance("dedup.sqlite", DedupStore)


# -- property: two copies per id, random interleaving, failures and crashes ---------

LEASE = 5.0
actions = st.lists(
    st.one_of(
        st.tuples(st.just("receive"), st.integers(0, 1)),
        st.tuples(st.just("finish"), st.integers(0, 1), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("crash"), st.integers(0, 1)),
        st.tuples(st.just("tick"), st.floats(0, 2 * LEASE)),
    ),
    max_size=80,
)


class Receiver:
    """One receiver process: its copies waiting on the broker and its running handlers."""

    def __init__(self, store: DedupStore, clock: FakeClock, copies: list[str]) -> None:
        self.store, self.clock = store, clock
        self.dedup = Deduplicator(store, lease=LEASE, clock=clock)
        self.waiting = list(copies)
        self.running: list[tuple[str, float]] = []  # (id, lease deadline)

    def receive(self) -> None:
        if self.waiting:
            mid = self.waiting.pop(0)
            verdict = self.dedup.check(mid)
            if verdict is DELIVER:
                self.running.append((mid, self.clock.now + LEASE))
            elif verdict is HOLD:
                self.waiting.append(mid)  # abandoned: the broker redelivers it later

    def finish(self, index: int, ok: bool, successes: dict[str, int]) -> None:
        if self.running:
            mid, _ = self.running.pop(index % len(self.running))
            if ok:
                successes[mid] += 1
                self.dedup.succeeded(mid)
            else:
                self.dedup.failed(mid)
                self.waiting.append(mid)

    def crash(self) -> None:
        # The process dies without finishing: its claims stay until the lease runs
        # out; the broker redelivers its locked copies; a new process starts.
        self.waiting.extend(mid for mid, _ in self.running)
        self.running.clear()
        self.dedup = Deduplicator(self.store, lease=LEASE, clock=self.clock)


@settings(max_examples=200, deadline=None)
@given(n_ids=st.integers(1, 6), script=actions, data=st.data())
def test_each_id_succeeds_exactly_once(n_ids: int, script: list[Any], data: st.DataObject) -> None:
    """Two receivers share a store and each gets one copy of every id, in any order.

    Handlers fail, receivers crash and time passes at random while the script lasts;
    then every handler succeeds. Handlers that run finish within their lease (a lease
    cannot protect against a live holder that overruns it). Never two successful
    deliveries of one id, and every id ends delivered and done.
    """
    clock = FakeClock()
    store = InMemoryDedupStore(window=DedupWindow(seconds=10_000, count=10_000))
    ids = [f"id{i}" for i in range(n_ids)]
    receivers = [Receiver(store, clock, data.draw(st.permutations(ids))) for _ in range(2)]
    successes = dict.fromkeys(ids, 0)

    def tick(seconds: float) -> None:
        deadlines = [d for r in receivers for _, d in r.running]
        clock.now = min([clock.now + seconds, *(d - 0.001 for d in deadlines)])

    for action in script:
        kind, *args = action
        if kind == "receive":
            receivers[args[0]].receive()
        elif kind == "finish":
            receivers[args[0]].finish(args[1], args[2], successes)
        elif kind == "crash":
            receivers[args[0]].crash()
        else:
            tick(args[0])
        assert max(successes.values()) <= 1
    # Drain: handlers now always succeed; time moves on so crashed claims expire.
    for _ in range(1_000):
        if not any(r.waiting or r.running for r in receivers):
            break
        for r in receivers:
            while r.running:
                r.finish(0, True, successes)
            for _ in range(len(r.waiting)):
                r.receive()
        tick(1.0)
    assert successes == dict.fromkeys(ids, 1)
    assert all(r.dedup.is_done(mid) for r in receivers for mid in ids)
