"""The ownership manager driving real balancing cycles, on virtual time."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest

from gateway.consumer._balance import BalanceSettings
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import InMemoryCheckpointStore
from gateway.consumer._virtual import run_virtual
from replication import ConfigError, NamespaceUnavailable, OwnershipLost

GROUP = ConsumerGroupRef(fully_qualified_namespace="ns.example", eventhub_name="hub")
PIDS = ("0", "1", "2", "3")
S = BalanceSettings()


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.stamp: dict[str, dict[str, float]] = {}  # "name.kind" -> pid -> time

    def hooks(self, name: str) -> dict[str, Any]:
        def record(kind: str) -> Any:
            async def hook(pid: str) -> None:
                self.events.append((f"{name}.{kind}", pid))
                if f"{name}.{kind}" in self.stamp:
                    self.stamp[f"{name}.{kind}"][pid] = asyncio.get_running_loop().time()
            return hook
        return {f"on_{k}" if k != "before_release" else k: record(k)
                for k in ("claimed", "before_release", "released", "lost")}


class Group:
    """Managers of one group on one in-memory store, on the running virtual loop."""

    def __init__(self, store: InMemoryCheckpointStore | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.store = store or InMemoryCheckpointStore(clock=self.loop.time)
        self.log = Log()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.managers: dict[str, OwnershipManager] = {}

    def manager(self, name: str, *, store: Any = None) -> OwnershipManager:
        return OwnershipManager(store or self.store, GROUP, PIDS, instance_id=name,
                                settings=S, clock=self.loop.time, rng=random.Random(name),
                                **self.log.hooks(name))

    def start(self, name: str, **kwargs: Any) -> OwnershipManager:
        m = self.managers[name] = self.manager(name, **kwargs)
        self.tasks[name] = self.loop.create_task(m.run())
        return m

    async def cancel(self, name: str) -> None:
        task = self.tasks.pop(name)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        for name in list(self.tasks):
            await self.cancel(name)

    def owners(self) -> dict[str, str]:
        return {p: n for n, m in self.managers.items() if n in self.tasks for p in m.owned}

    async def until(self, check: Any, limit: float) -> float:
        start = self.loop.time()
        while not check():
            assert self.loop.time() - start <= limit, f"not within {limit} s: {self.owners()}"
            await asyncio.sleep(0.05)
        return self.loop.time() - start


def virtual(test: Coroutine[Any, Any, None]) -> None:
    run_virtual(test, start=1_000.0)


def test_two_instances_split_the_partitions_and_never_share_one():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 5)
        for _ in range(100):  # Then no partition is ever read by both
            assert not a.owned & b.owned
            await asyncio.sleep(0.5)
        assert a.idle and b.idle
        await g.close()
    virtual(main())


def test_a_crashed_instances_partitions_are_re_owned_after_its_heartbeat_expires():
    async def main() -> None:
        g = Group()
        g.start("a")
        b = g.start("b")
        await g.until(lambda: len(b.owned) == 2 and g.managers["a"].idle, 10)
        # When "a" crashes (no release)
        await g.cancel("a")
        # Then "b" owns everything within the expiry plus one idle turn, not before
        took = await g.until(lambda: len(b.owned) == 4, S.heartbeat_expiry + 2 * S.idle_interval)
        assert took > S.heartbeat_expiry - S.heartbeat_interval
        await g.close()
    virtual(main())


def test_graceful_stop_keeps_reading_until_a_polling_instance_takes_each_partition():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and a.idle and b.idle, 10)
        mine = set(a.owned)
        released: dict[str, float] = {}
        claimed: dict[str, float] = {}
        g.log.stamp = {"a.released": released, "b.claimed": claimed}
        # When "a" stops gracefully while "b" is idle
        await g.cancel("a")
        began = g.loop.time()
        await a.stop()
        took = g.loop.time() - began
        # Then "a" kept its partitions until "b" came to fast cycles (woken, at its
        # next heartbeat), so the stop took a while, but less than a heartbeat expiry
        assert S.interval < took < S.heartbeat_expiry + S.interval
        # each partition was checkpointed before its release
        kinds = [(k, p) for k, p in g.log.events if k.startswith("a.") and p in mine]
        for pid in mine:
            assert kinds.index(("a.before_release", pid)) < kinds.index(("a.released", pid))
        assert not a.owned
        # and "b" read each one again within one interval of its release
        await g.until(lambda: len(b.owned) == 4, S.interval + 0.5)
        for pid in mine:
            assert 0 <= claimed[pid] - released[pid] <= S.interval + 0.1, (claimed, released)
        assert all(o.owner_id != "a" for o in await g.store.list_ownership(GROUP)
                   if o.partition_id in mine)
        await g.close()
    virtual(main())


def test_a_leaving_instance_is_not_stolen_from_and_gets_no_share():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and a.idle and b.idle, 10)
        await g.cancel("a")
        # "a" announces its leave but hands nothing over (no taker polls yet)
        a._leaving = True
        decision = await a.run_once()
        assert decision is not None and decision.targets["a"] == 0
        assert decision.live == ("b",) and not decision.releases
        # "b", running its own cycles, waits for the hand-over instead of stealing
        for _ in range(20):
            assert not a.owned & b.owned and len(a.owned) == 2
            await asyncio.sleep(0.5)
        await g.close()
    virtual(main())


def test_a_stop_with_nobody_to_take_over_releases_at_once():
    async def main() -> None:
        g = Group()
        a = g.start("a")
        await g.until(lambda: len(a.owned) == 4, 10)
        await g.cancel("a")
        began = g.loop.time()
        await a.stop()
        assert g.loop.time() - began < S.interval
        assert not a.owned
        assert all(o.owner_id == "" for o in await g.store.list_ownership(GROUP))
    virtual(main())


@pytest.mark.parametrize("handover_timeout", [0.0, 3.0])
def test_a_stop_releases_what_nobody_took_once_the_handover_timeout_passes(
    handover_timeout: float,
):
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and a.idle and b.idle, 10)
        await g.cancel("b")  # a crash: "b" still looks alive for a while
        await g.cancel("a")
        began = g.loop.time()
        await a.stop(handover_timeout=handover_timeout)
        took = g.loop.time() - began
        assert handover_timeout <= took < handover_timeout + S.interval
        assert not a.owned
        records = {o.partition_id: o.owner_id for o in await g.store.list_ownership(GROUP)}
        assert [records[p] for p in sorted(records) if records[p] != "b"] == ["", ""]
    virtual(main())


def test_a_stop_waits_no_longer_than_a_dead_peers_heartbeat_expiry():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and a.idle and b.idle, 10)
        await g.cancel("b")
        await g.cancel("a")
        began = g.loop.time()
        await a.stop()  # the default timeout (30 s) is longer than the expiry
        assert g.loop.time() - began <= S.heartbeat_expiry + S.interval
        assert not a.owned
    virtual(main())


def test_a_newcomer_gets_its_share_by_hand_over_without_waiting_for_expiry():
    async def main() -> None:
        g = Group()
        a = g.start("a")
        await g.until(lambda: len(a.owned) == 4 and a.idle, 10)
        b = g.start("b")
        await g.until(lambda: len(b.owned) == 2 and len(a.owned) == 2,
                      S.idle_interval + 3 * S.interval)
        assert ("a.before_release", next(iter(b.owned))) in g.log.events
        await g.close()
    virtual(main())


def test_a_restarted_static_instance_takes_its_partitions_back_at_once():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and len(b.owned) == 2, 10)
        mine = set(a.owned)
        await g.cancel("a")  # a crash; the records still name "a"
        # When "a" restarts under the same instance_id
        again = g.manager("a")
        await again.run_once()
        # Then it holds the same partitions after one cycle, with no expiry wait
        assert again.owned == mine
        assert not b.owned & mine
        await g.close()
    virtual(main())


class FailingStore(InMemoryCheckpointStore):
    def __init__(self, clock: Any, *, claims: bool = False, beats: bool = False) -> None:
        super().__init__(clock=clock)
        self.fail_claims, self.fail_beats = claims, beats

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        if self.fail_claims:
            raise NamespaceUnavailable("store down", namespace="store")
        return await super().claim_ownership(claims)

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        if self.fail_beats:
            raise NamespaceUnavailable("store down", namespace="store")
        return await super().heartbeat(heartbeat)


def test_a_store_error_on_claim_is_never_taken_as_won():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        store = FailingStore(loop.time, claims=True)
        g = Group(store)
        a = g.start("a")
        await asyncio.sleep(5)
        assert not a.owned
        assert not [e for e in g.log.events if e[0] == "a.claimed"]
        # When the store recovers, the next cycles claim
        store.fail_claims = False
        await g.until(lambda: len(a.owned) == 4, 2 * S.interval)
        await g.close()
    virtual(main())


def test_an_instance_that_cannot_heartbeat_drops_its_partitions_before_others_may_claim():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        store = FailingStore(loop.time)
        g = Group(store)
        a = g.start("a")
        await g.until(lambda: len(a.owned) == 4 and a.idle, 10)
        store.fail_beats = True
        (beat,) = await store.list_heartbeats(GROUP)
        await g.until(lambda: not a.owned, S.heartbeat_expiry)
        assert beat.last_modified_time is not None
        assert loop.time() - beat.last_modified_time <= S.heartbeat_expiry - S.fence_margin + 0.1
        assert sorted(p for k, p in g.log.events if k == "a.lost") == list(PIDS)
        await g.close()
    virtual(main())


def test_checkpoints_of_a_stale_owner_are_fenced():
    async def main() -> None:
        g = Group()
        a, b = g.start("a"), g.start("b")
        await g.until(lambda: len(a.owned) == 2 and a.idle, 10)
        pid = sorted(a.owned)[0]
        await g.cancel("a")  # "a" hangs; "b" takes over after the expiry
        await g.until(lambda: pid in b.owned, S.heartbeat_expiry + 2 * S.idle_interval)
        checkpoint = Checkpoint(fully_qualified_namespace=GROUP.fully_qualified_namespace,
                                eventhub_name=GROUP.eventhub_name,
                                consumer_group=GROUP.consumer_group, partition_id=pid,
                                offset="10", sequence_number=10)
        with pytest.raises(OwnershipLost):
            await g.store.update_checkpoint(checkpoint, owner_id="a")
        await g.store.update_checkpoint(checkpoint, owner_id="b")
        await g.close()
    virtual(main())


def test_steady_state_store_traffic_is_heartbeats_and_one_list_per_idle_turn():
    async def main() -> None:
        g = Group()
        counted: list[str] = []
        for name in ("list_ownership", "list_heartbeats", "claim_ownership", "heartbeat",
                     "wake"):
            method = getattr(g.store, name)

            async def wrapper(*args: Any, _m: Any = method, _n: str = name) -> Any:
                counted.append(_n)
                return await _m(*args)
            setattr(g.store, name, wrapper)
        for name in ("a", "b", "c"):
            g.start(name)
        await asyncio.sleep(60)
        counted.clear()
        await asyncio.sleep(600)
        minutes = 10
        assert counted.count("claim_ownership") == 0
        assert counted.count("wake") == 0
        assert counted.count("list_ownership") == 0
        assert counted.count("list_heartbeats") / minutes <= 60 / S.idle_interval + 0.2
        assert counted.count("heartbeat") / minutes <= 3 * 60 / S.heartbeat_interval + 0.5
        await g.close()
    virtual(main())


@pytest.mark.parametrize("instance_id", ["x#left", "x#leaving", ""])
def test_instance_id_must_not_look_like_a_leave_marker(instance_id: str):
    with pytest.raises(ConfigError):
        OwnershipManager(InMemoryCheckpointStore(), GROUP, PIDS, instance_id=instance_id)
