"""The pure balancing function after a graceful leave or a crash: free partitions are
dealt to the instances that keep them, idle ones are woken, and each partition moves
once (no ping-pong among survivors). Clock and rng are injected."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.consumer._balance import LEAVING_SUFFIX, BalanceDecision, BalanceSettings, balance
from gateway.consumer._records import Ownership

from .test_balance import GROUP, NOW, CasStore, S, _balanced_group, counts


class Moves:
    """Every owner each partition had, in order, across the writes of a CasStore."""

    def __init__(self, store: CasStore) -> None:
        self.store = store
        self.owners = {p: [o] for p, o in store.owners().items()}

    def apply(self, me: str, d: BalanceDecision) -> None:
        self.store.apply(me, d)
        for p, o in self.store.owners().items():
            if self.owners.setdefault(p, [o])[-1] != o:
                self.owners[p].append(o)

    def moved(self, pid: str) -> int:
        return len(self.owners[pid]) - 1


def _members(n: int) -> list[str]:
    return [f"i{k}" for k in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.randoms(use_true_random=False), st.data())
def test_a_graceful_leave_moves_each_partition_once_to_the_instance_that_keeps_it(
    partitions, n, rng, data,
):
    # Given a balanced group whose members are all idle, and one of them leaving
    names = _members(n + 1)
    store = _balanced_group(partitions, names, rng)
    moves = Moves(store)
    leaver = data.draw(st.sampled_from(names))
    store.beat(leaver + LEAVING_SUFFIX, at=NOW + 0.1)
    theirs = {p for p, o in store.owners().items() if o == leaver}
    stay = [x for x in names if x != leaver]
    awake: set[str] = set()
    woken: set[str] = set()
    # When the leaver cycles and wakes whoever must act, and each woken instance
    # comes to fast cycles in its own time (idle ones do nothing meanwhile)
    for _ in range(3 * len(names) + 3):
        d = balance(store.view(), me=leaver, now=NOW + 0.2, rng=rng, settings=S,
                    active=awake, leaving=True)
        assert not d.claims
        woken |= set(d.wake)
        moves.apply(leaver, d)
        if woken - awake:
            awake.add(data.draw(st.sampled_from(sorted(woken - awake))))
        for x in data.draw(st.permutations(sorted(awake))):
            d = balance(store.view(), me=x, now=NOW + 0.2, rng=rng, settings=S,
                        active=awake | {leaver})
            assert not d.releases  # no survivor ever hands one on
            moves.apply(x, d)
    # Then the leaver ends with nothing, the rest balanced, and every partition of
    # the leaver moved exactly once; none of the others moved
    assert leaver not in store.owners().values()
    assert set(store.owners()) == set(store.pids)
    c = counts(store, stay)
    assert max(c) - min(c) <= 1
    assert all(moves.moved(p) == (1 if p in theirs else 0) for p in store.pids), moves.owners


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.randoms(use_true_random=False), st.data())
def test_a_crashed_instances_partitions_move_once_to_the_instances_that_keep_them(
    partitions, n, rng, data,
):
    # Given a balanced idle group in which one instance's heartbeat has expired
    names = _members(n + 1)
    store = _balanced_group(partitions, names, rng)
    moves = Moves(store)
    dead = data.draw(st.sampled_from(names))
    store.beat(dead, at=NOW - S.heartbeat_expiry - 1)
    theirs = {p for p, o in store.owners().items() if o == dead}
    stay = [x for x in names if x != dead]
    # When the first to notice (on its idle turn) wakes the others that must act,
    # and they come to fast cycles one by one
    awake = {data.draw(st.sampled_from(stay))}
    woken: set[str] = set()
    for _ in range(2 * len(names) + 2):
        for x in data.draw(st.permutations(sorted(awake))):
            d = balance(store.view(), me=x, now=NOW, rng=rng, settings=S, active=awake)
            assert not d.releases
            woken |= set(d.wake)
            moves.apply(x, d)
        if woken - awake:
            awake.add(data.draw(st.sampled_from(sorted(woken - awake))))
    # Then the survivors are balanced and each of the dead one's partitions moved once
    assert set(store.owners()) == set(store.pids)
    c = counts(store, stay)
    assert max(c) - min(c) <= 1
    assert all(moves.moved(p) == (1 if p in theirs else 0) for p in store.pids), moves.owners


def _crashed(rng: random.Random, dead_at: float) -> tuple[CasStore, set[str]]:
    """a, b, c, d with 2 partitions each; "d" last heartbeat at ``dead_at``."""
    store = _balanced_group(8, ["a", "b", "c", "d"], rng)
    store.beat("d", at=dead_at)
    return store, {p for p, o in store.owners().items() if o == "d"}


def test_the_first_to_see_a_crash_claims_only_its_share_and_wakes_the_others():
    rng = random.Random(11)
    last = NOW - S.heartbeat_expiry - 1
    store, theirs = _crashed(rng, last)
    # When "a" notices on its turn, the others idle
    d = balance(store.view(), me="a", now=NOW, rng=rng, settings=S, active=())
    # Then it takes one (its share: 8 over 3 is 3, 3, 2), and wakes "b" for the other
    # ("c" holds its 2 already)
    assert d.targets == {"a": 3, "b": 3, "c": 2}
    assert len(d.claims) == 1 and {c.partition_id for c in d.claims} < theirs
    assert d.wake == ("b",) and not d.settled
    store.apply("a", d)
    # and "b", once woken, takes exactly the one dealt to it: the first "a" did not take
    d = balance(store.view(), me="b", now=NOW, rng=rng, settings=S, active=("a", "b"))
    left = sorted(p for p in theirs if store.owners()[p] == "d")
    assert len(left) == 1 and [c.partition_id for c in d.claims] == left
    # (c's target is 2, which it holds: it had nothing to take)


def test_a_partition_dealt_to_an_idle_instance_waits_for_it_up_to_the_wake_grace():
    rng = random.Random(12)
    last = NOW - S.heartbeat_expiry - 1
    store, theirs = _crashed(rng, last)
    free_since = last + S.heartbeat_expiry
    assert S.wake_grace == 2 * S.idle_interval + S.heartbeat_interval + 2 * S.interval == 21.5

    def claims(now: float) -> set[str]:
        for x in ("a", "b", "c"):
            store.beat(x, at=now - 1)  # the survivors heartbeat all along
        d = balance(store.view(), me="a", now=now, rng=rng, settings=S, active=())
        return {c.partition_id for c in d.claims}

    # Before the grace "a" claims its own share only; after it, all of them
    assert len(claims(free_since + S.wake_grace - 0.1)) == 1
    assert claims(free_since + S.wake_grace + 0.1) == theirs


def test_a_released_partition_waits_from_its_release_not_from_its_records_age():
    rng = random.Random(13)
    store = _balanced_group(4, ["a", "b"], rng)
    # "b" left, releasing both of its partitions at NOW (its #left marker newer)
    for o in list(store.records.values()):
        if o.owner_id == "b":
            store.write(replace(o, owner_id=""), at=NOW)
    store.beat("b#left", at=NOW)
    store.beat("c", at=NOW)  # a newcomer, idle
    d = balance(store.view(), me="a", now=NOW + 1, rng=rng, settings=S, active=())
    assert d.targets == {"a": 2, "c": 2} and len(d.claims) == 0
    assert d.wake == ("c",)
    # (its record is older than the release: the release time counts)
    store.beat("a", at=NOW + S.wake_grace)
    store.beat("c", at=NOW + S.wake_grace)
    d = balance(store.view(), me="a", now=NOW + S.wake_grace + 0.1, rng=rng, settings=S,
                active=())
    assert len(d.claims) == 2


def test_an_instance_over_its_share_releases_only_what_free_partitions_do_not_cover():
    # Given 9 partitions: "a" holds 5, "b" 2, "c" (idle) none, and 2 are free; shares
    # are 3 each, the free ones are dealt one to "b" and one to "c"
    rng = random.Random(14)
    store = CasStore(9)
    for x in "abc":
        store.beat(x)
    for pid, owner in zip(store.pids, "aaaaabb--", strict=True):
        store.write(Ownership(**vars(GROUP), partition_id=pid, owner_id=owner.strip("-")))
    # When "a" decides with only "b" polling, Then it hands nothing to "b" (a free
    # one covers it; one more would put "b" over its share and move again later)
    d = balance(store.view(), me="a", now=NOW, rng=rng, settings=S, active=("b",))
    assert d.targets == {"a": 3, "b": 3, "c": 3} and d.releases == ()
    assert d.wake == ("c",)
    d = balance(store.view(), me="b", now=NOW, rng=rng, settings=S, active=("a", "b"))
    assert [c.partition_id for c in d.claims] == ["7"]


def test_only_idle_instances_that_must_act_and_write_heartbeats_are_woken():
    rng = random.Random(15)
    store = _balanced_group(8, ["a", "b", "c"], rng)
    view = store.view()
    # In a balanced group nobody is woken
    assert balance(view, me="a", now=NOW, rng=rng, settings=S, active=()).wake == ()
    # A newcomer wakes those over their new share (8 over 4: 2), not those polling
    over = sorted(x for x in "abc" if list(store.owners().values()).count(x) == 3)
    assert len(over) == 2
    store.beat("n")
    d = balance(store.view(), me="n", now=NOW, rng=rng, settings=S, active=())
    assert d.wake == tuple(over)
    d = balance(store.view(), me="n", now=NOW, rng=rng, settings=S, active=over[:1])
    assert d.wake == tuple(over[1:])
    # An azure-eventhub owner (records, no heartbeat) cannot be woken
    sdk = CasStore(4)
    sdk.beat("a")
    for pid in sdk.pids:
        sdk.write(Ownership(**vars(GROUP), partition_id=pid, owner_id="sdk"))
    assert balance(sdk.view(), me="a", now=NOW, rng=rng, settings=S, active=()).wake == ()


def test_wake_grace_follows_the_settings():
    s = BalanceSettings(interval=0.5, idle_interval=2.0, heartbeat_interval=1.0,
                        heartbeat_expiry=3.0)
    assert s.wake_grace == 2 * 2.0 + 1.0 + 2 * 0.5
