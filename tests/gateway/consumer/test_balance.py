"""Properties of the pure balancing function, checked against an etag CAS store model."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.consumer._balance import (
    LEAVING_SUFFIX,
    LEFT_SUFFIX,
    BalanceDecision,
    BalanceSettings,
    BalanceView,
    balance,
)
from gateway.consumer._records import ConsumerGroupRef, Heartbeat, Ownership
from replication import ConfigError

GROUP = ConsumerGroupRef(fully_qualified_namespace="ns.example", eventhub_name="hub")
S = BalanceSettings()
NOW = 1_000.0


class CasStore:
    """Ownership records with etag compare-and-swap, and heartbeats: a consistent store."""

    def __init__(self, partitions: int) -> None:
        self.pids = tuple(str(i) for i in range(partitions))
        self.records: dict[str, Ownership] = {}
        self.beats: dict[str, Heartbeat] = {}

    def beat(self, instance: str, at: float = NOW) -> None:
        self.beats[instance] = Heartbeat(fully_qualified_namespace=GROUP.fully_qualified_namespace,
                                         eventhub_name=GROUP.eventhub_name,
                                         consumer_group=GROUP.consumer_group,
                                         instance_id=instance, last_modified_time=at)

    def view(self) -> BalanceView:
        return BalanceView(group=GROUP, partition_ids=self.pids,
                           ownerships=tuple(self.records.values()),
                           heartbeats=tuple(self.beats.values()))

    def write(self, claim: Ownership, at: float = NOW) -> bool:
        current = self.records.get(claim.partition_id)
        if (current.etag if current else None) != claim.etag:
            return False
        self.records[claim.partition_id] = replace(claim, etag=uuid.uuid4().hex,
                                                   last_modified_time=at)
        return True

    def apply(self, me: str, d: BalanceDecision) -> None:
        for pid in d.releases:
            self.write(replace(self.records[pid], owner_id=""))
        for claim in d.renewals + d.claims:
            self.write(claim)

    def owners(self) -> dict[str, str]:
        return {p: o.owner_id for p, o in self.records.items() if o.owner_id}


def decide(store: CasStore, me: str, rng: random.Random, now: float = NOW) -> BalanceDecision:
    return balance(store.view(), me=me, now=now, rng=rng, settings=S)


def counts(store: CasStore, live: list[str]) -> list[int]:
    owners = list(store.owners().values())
    return [owners.count(x) for x in live]


scenario = st.tuples(st.integers(1, 40), st.integers(1, 8), st.randoms(use_true_random=False))


@settings(max_examples=60, deadline=None)
@given(scenario, st.data())
def test_decisions_applied_in_any_order_never_give_a_partition_two_owners(case, data):
    # Given a consistent store and instances that each read the same snapshot
    partitions, n, rng = case
    store = CasStore(partitions)
    live = [f"i{k}" for k in range(n)]
    for x in live:
        store.beat(x)
    for _ in range(3):
        # When every instance decides on the snapshot and writes land in any order
        view = store.view()
        decisions = [(x, balance(view, me=x, now=NOW, rng=rng, settings=S)) for x in live]
        order = data.draw(st.permutations(decisions))
        for x, d in order:
            store.apply(x, d)
            # Then each partition has one record, so at most one owner
            assert len(store.records) == len(set(store.records))
        won: dict[str, list[str]] = {}
        for x, d in decisions:
            for c in d.claims + d.renewals:
                if store.records[c.partition_id].owner_id == x:
                    won.setdefault(c.partition_id, []).append(x)
        assert all(len(v) == 1 for v in won.values())


@settings(max_examples=60, deadline=None)
@given(scenario)
def test_every_partition_owned_and_balanced_after_a_few_cycles(case):
    # Given instances that have all heartbeated, starting from nothing
    partitions, n, rng = case
    store = CasStore(partitions)
    live = [f"i{k}" for k in range(n)]
    for x in live:
        store.beat(x)
    # When each runs cycles one after another (interleaved, like a real group)
    for _ in range(3):
        for x in live:
            store.apply(x, decide(store, x, rng))
    # Then every partition is owned by a live instance and shares differ by one
    assert set(store.owners()) == set(store.pids)
    c = counts(store, live)
    assert max(c) - min(c) <= 1
    for x in live:
        held = {p: o.etag for p, o in store.records.items() if o.owner_id == x}
        d = balance(store.view(), me=x, now=NOW, rng=rng, settings=S, held=held)  # type: ignore[arg-type]
        assert d.settled


@settings(max_examples=60, deadline=None)
@given(scenario, st.integers(1, 4))
def test_a_newcomer_is_served_by_releases_not_steals(case, newcomers):
    # Given a balanced group
    partitions, n, rng = case
    store = CasStore(partitions)
    old = [f"i{k}" for k in range(n)]
    for x in old:
        store.beat(x)
    for _ in range(3):
        for x in old:
            store.apply(x, decide(store, x, rng))
    before = store.owners()
    new = [f"n{k}" for k in range(newcomers)]
    for x in new:
        store.beat(x)
    live = old + new
    for _ in range(3):
        for x in live:
            view = store.view()
            d = decide(store, x, rng)
            # Then nobody claims a partition a live instance owns (only orphans)
            owners = {o.partition_id: o.owner_id for o in view.ownerships}
            assert all(owners.get(c.partition_id, "") in ("", x) for c in d.claims)
            # and only an instance over its target releases, never below it
            mine = sum(1 for o in owners.values() if o == x)
            if d.releases:
                assert mine > d.targets[x]
                assert mine - len(d.releases) >= d.targets[x]
            store.apply(x, d)
    assert set(store.owners()) == set(store.pids)
    c = counts(store, live)
    assert max(c) - min(c) <= 1
    assert before  # the group owned partitions before the newcomers came


def test_without_wakes_a_dead_instances_partitions_are_claimed_at_once_by_the_first_to_see():
    # Given 3 instances, one of which stopped heartbeating long ago
    store, rng = CasStore(9), random.Random(1)
    for x in ("a", "b", "c"):
        store.beat(x)
    for _ in range(2):
        for x in ("a", "b", "c"):
            store.apply(x, decide(store, x, rng))
    store.beat("c", at=NOW - S.heartbeat_expiry - 1)
    # When "a" runs a cycle, the driver saw nobody else polling fast, and the store
    # cannot wake "b"
    d = balance(store.view(), me="a", now=NOW, rng=rng, settings=S, active=(), wakes=False)
    # Then it claims all of c's partitions (nobody else is polling to take them)
    theirs = {p for p, o in store.owners().items() if o == "c"}
    assert {c.partition_id for c in d.claims} == theirs
    assert d.live == ("a", "b")


def test_a_live_owner_with_an_old_record_is_not_stolen_from():
    # Given "b" heartbeats but has not rewritten its records for ten minutes
    store, rng = CasStore(4), random.Random(2)
    store.beat("b")
    for pid in store.pids:
        store.write(Ownership(fully_qualified_namespace=GROUP.fully_qualified_namespace,
                              eventhub_name=GROUP.eventhub_name,
                              consumer_group=GROUP.consumer_group, partition_id=pid,
                              owner_id="b"), at=NOW - 600)
    store.beat("a")
    # When "a" decides, Then it claims nothing: b is alive by its heartbeat
    assert decide(store, "a", rng).claims == ()


def test_owners_without_heartbeats_live_by_their_records_like_the_sdk():
    # Given records of an azure-eventhub consumer (no heartbeat), one of them stale
    store, rng = CasStore(2), random.Random(3)
    for pid, age in (("0", 10.0), ("1", S.ownership_expiry + 1)):
        store.write(Ownership(fully_qualified_namespace=GROUP.fully_qualified_namespace,
                              eventhub_name=GROUP.eventhub_name,
                              consumer_group=GROUP.consumer_group, partition_id=pid,
                              owner_id="sdk"), at=NOW - age)
    store.beat("a")
    d = decide(store, "a", rng)
    assert [c.partition_id for c in d.claims] == ["1"]
    assert d.live == ("a", "sdk")


def test_a_leave_marker_makes_the_leaver_not_live():
    store, rng = CasStore(4), random.Random(4)
    store.beat("a")
    store.beat("b")
    store.beat("b" + LEFT_SUFFIX, at=NOW + 0.1)
    d = balance(store.view(), me="a", now=NOW + 0.2, rng=rng, settings=S)
    assert d.live == ("a",)
    assert len(d.claims) == 4


def _balanced_group(partitions: int, names: list[str], rng: random.Random) -> CasStore:
    store = CasStore(partitions)
    for x in names:
        store.beat(x)
    for _ in range(3):
        for x in names:
            store.apply(x, decide(store, x, rng))
    return store


def test_a_leaving_instance_keeps_its_partitions_until_it_hands_them_over():
    # Given "b" announced its leave (a #leaving beat newer than its own)
    rng = random.Random(7)
    store = _balanced_group(6, ["a", "b", "c"], rng)
    store.beat("b" + LEAVING_SUFFIX, at=NOW + 0.1)
    theirs = {p for p, o in store.owners().items() if o == "b"}
    # When "a" decides, Then "b" is not live for shares and nobody claims from it
    d = balance(store.view(), me="a", now=NOW + 0.2, rng=rng, settings=S, active=())
    assert d.live == ("a", "c") and d.targets["b"] == 0
    assert not {c.partition_id for c in d.claims} & theirs
    assert not d.settled  # "a" needs more, so it keeps cycling fast
    # and once its leave is recorded (#left newer still), they are orphans: "a"
    # claims those dealt to it and wakes "c" for the rest
    store.beat("b" + LEFT_SUFFIX, at=NOW + 0.3)
    d = balance(store.view(), me="a", now=NOW + 0.4, rng=rng, settings=S, active=())
    assert len(d.claims) == 1 and {c.partition_id for c in d.claims} < theirs
    assert d.wake == ("c",)
    d = balance(store.view(), me="a", now=NOW + 0.4, rng=rng, settings=S, active=(),
                wakes=False)
    assert {c.partition_id for c in d.claims} == theirs


def test_without_wakes_the_leaver_hands_everything_to_whoever_polls_now():
    rng = random.Random(8)
    store = _balanced_group(9, ["a", "b", "c"], rng)
    store.records["8"] = replace(store.records["8"], owner_id="")  # an orphan
    mine = {p for p, o in store.owners().items() if o == "b"}
    # With nobody polling fast, nothing goes
    d = balance(store.view(), me="b", now=NOW, rng=rng, settings=S, active=(),
                leaving=True, wakes=False)
    assert d.releases == () and d.claims == () and d.targets["b"] == 0
    # With one instance polling (even if it is at its share), all of it goes to it
    d = balance(store.view(), me="b", now=NOW, rng=rng, settings=S, active=("c",),
                leaving=True, wakes=False)
    assert set(d.releases) == mine and d.claims == ()
    # and that instance claims all of it, over its share
    for pid in d.releases:
        store.write(replace(store.records[pid], owner_id=""))
    d = balance(store.view(), me="c", now=NOW, rng=rng, settings=S, active=("c",),
                wakes=False)
    assert {c.partition_id for c in d.claims} == mine | {"8"}


def test_a_heartbeat_newer_than_the_leave_announcement_is_a_restart():
    rng = random.Random(9)
    store = _balanced_group(4, ["a", "b"], rng)
    store.beat("b" + LEAVING_SUFFIX, at=NOW + 0.1)
    store.beat("b", at=NOW + 0.2)  # restarted under its static id
    d = balance(store.view(), me="a", now=NOW + 0.3, rng=rng, settings=S)
    assert d.live == ("a", "b") and d.targets == {"a": 2, "b": 2}


@settings(max_examples=60, deadline=None)
@given(scenario, st.data())
def test_a_graceful_leave_moves_every_partition_once_without_two_owners(case, data):
    # Given a balanced group in which one instance starts leaving
    partitions, n, rng = case
    names = [f"i{k}" for k in range(n + 1)]
    store = _balanced_group(partitions, names, rng)
    leaver = data.draw(st.sampled_from(names))
    store.beat(leaver + LEAVING_SUFFIX, at=NOW + 0.1)
    stay = [x for x in names if x != leaver]
    now = NOW + 0.2
    # When everyone cycles, in any order, each seeing any set of fast pollers
    for _ in range(4):
        for x in data.draw(st.permutations(names)):
            active = data.draw(st.sets(st.sampled_from(stay)))
            view = store.view()
            owners = {o.partition_id: o.owner_id for o in view.ownerships}
            d = balance(view, me=x, now=now, rng=rng, settings=S, active=active,
                        leaving=x == leaver)
            # Then nobody claims what another holds, and the leaver claims nothing
            assert all(owners.get(c.partition_id, "") in ("", x) for c in d.claims)
            assert x != leaver or not d.claims
            store.apply(x, d)
    # and once everyone polls fast, the leaver ends with nothing, the rest balanced
    for _ in range(3):
        for x in names:
            store.apply(x, balance(store.view(), me=x, now=now, rng=rng, settings=S,
                                   active=stay, leaving=x == leaver))
    assert leaver not in store.owners().values()
    assert set(store.owners()) == set(store.pids)
    c = counts(store, stay)
    assert max(c) - min(c) <= 1


def test_static_membership_renews_records_that_still_name_me():
    # Given records naming "a" from before a restart, and a restarted "a" holding nothing
    store, rng = CasStore(3), random.Random(5)
    store.beat("a")
    store.apply("a", decide(store, "a", rng))
    etags = {p: o.etag for p, o in store.records.items()}
    # When it decides with nothing held, Then it renews them with the etags read
    d = decide(store, "a", rng)
    assert {(r.partition_id, r.etag) for r in d.renewals} == set(etags.items())
    # and with them held, there is nothing to do
    d = balance(store.view(), me="a", now=NOW, rng=rng, settings=S, held=etags)  # type: ignore[arg-type]
    assert d.settled and not d.renewals


def test_a_partition_held_but_named_for_someone_else_is_lost():
    store, rng = CasStore(1), random.Random(6)
    store.beat("a")
    store.beat("b")
    store.apply("b", decide(store, "b", rng))
    d = balance(store.view(), me="a", now=NOW, rng=rng, settings=S, held={"0": "old"})
    assert d.lost == ("0",)


def test_decisions_are_deterministic_for_a_seed():
    store = CasStore(16)
    for x in ("a", "b", "c"):
        store.beat(x)
    one = decide(store, "b", random.Random(9))
    two = decide(store, "b", random.Random(9))
    assert one == two


@pytest.mark.parametrize("kwargs", [
    {"interval": 0}, {"interval": -1.0}, {"idle_interval": float("nan")},
    {"heartbeat_interval": "5"}, {"heartbeat_expiry": 6.0}, {"settle_cycles": 0},
    {"settle_cycles": True}, {"heartbeat_expiry": 3.0, "heartbeat_interval": 1.0,
                              "interval": 1.5},
])
def test_bad_settings_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        BalanceSettings(**kwargs)


def test_settings_are_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        BalanceSettings(1.0)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        S.interval = 2.0  # type: ignore[misc]
