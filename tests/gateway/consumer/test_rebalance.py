"""Rebalancing speed of the ownership managers after a graceful stop or a crash, on
virtual time: survivors that were idle are woken, balanced again within about one
heartbeat interval, and each partition moves once."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from gateway.consumer._balance import LEFT_SUFFIX
from gateway.consumer._ownership import OwnershipManager
from gateway.consumer._records import ConsumerGroupRef, Heartbeat
from gateway.consumer._store import InMemoryCheckpointStore

from .test_ownership import GROUP, Group, S, virtual

PIDS = tuple(str(p) for p in range(16))
NAMES = ("a", "b", "c", "d", "e")


class ListingStore(InMemoryCheckpointStore):
    """Records when heartbeats were listed, and whether wakes are carried."""

    def __init__(self, clock: Any, *, wakes: bool = True) -> None:
        super().__init__(clock=clock)
        self.listed: list[float] = []
        self.supports_wake = wakes
        self._time = clock

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        self.listed.append(self._time())
        return await super().list_heartbeats(group)


class Group16(Group):
    def manager(self, name: str, *, store: Any = None) -> OwnershipManager:
        return OwnershipManager(store or self.store, GROUP, PIDS, instance_id=name,
                                settings=S, clock=self.loop.time, rng=random.Random(name),
                                **self.log.hooks(name))

    def balanced(self, names: tuple[str, ...]) -> bool:
        owned = [self.managers[x].owned for x in names]
        held = [p for o in owned for p in o]
        return sorted(held) == sorted(PIDS) and max(map(len, owned)) - min(map(len, owned)) <= 1


async def _idle_group(wakes: bool = True) -> Group16:
    g = Group16(ListingStore(asyncio.get_running_loop().time, wakes=wakes))
    for name in NAMES:
        g.start(name)
    await g.until(lambda: g.balanced(NAMES) and all(m.idle for m in g.managers.values()), 30)
    await asyncio.sleep(30)  # well into idle turns
    g.log.events.clear()
    return g


def _moves(g: Group16) -> tuple[list[str], list[tuple[str, str]]]:
    """(partitions claimed, in order; hand-overs written by anyone)."""
    claimed = [p for k, p in g.log.events if k.endswith(".claimed")]
    released = [(k, p) for k, p in g.log.events if k.endswith(".released")]
    return claimed, released


def test_survivors_of_a_graceful_stop_are_balanced_within_a_heartbeat_interval():
    async def main() -> None:
        g = await _idle_group()
        stay = tuple(x for x in NAMES if x != "c")
        leaver = g.managers["c"]
        theirs = set(leaver.owned)
        # When "c" stops gracefully while the others are idle
        await g.cancel("c")
        began = g.loop.time()
        await leaver.stop()
        # Then the survivors are balanced again within one heartbeat interval and a few
        # cycles of the stop() call (they were woken; before, they noticed one idle
        # turn after another: about 34 s)
        await g.until(lambda: g.balanced(stay), began + S.heartbeat_interval
                      + 4 * S.interval - g.loop.time())
        # and each of c's partitions moved once, from "c" to the survivor keeping it:
        # no survivor handed one on
        claimed, released = _moves(g)
        assert sorted(claimed) == sorted(theirs)
        assert {k for k, _ in released} == {"c.released"}
        for _ in range(60):  # and nothing moves afterwards
            await asyncio.sleep(1)
        assert _moves(g)[0] == claimed
        await g.close()
    virtual(main())


def test_survivors_of_a_crash_are_balanced_within_a_heartbeat_interval_of_its_detection():
    async def main() -> None:
        g = await _idle_group()
        store = g.store
        assert isinstance(store, ListingStore)
        stay = tuple(x for x in NAMES if x != "c")
        theirs = set(g.managers["c"].owned)
        [beat] = [h for h in await store.list_heartbeats(GROUP) if h.instance_id == "c"]
        assert beat.last_modified_time is not None
        # When "c" crashes (no release, no leave marker)
        await g.cancel("c")
        await g.until(lambda: g.balanced(stay), S.heartbeat_expiry + 3 * S.idle_interval)
        # Then, counted from the first heartbeat listing that could show it dead (an
        # idle turn), the survivors were balanced within a heartbeat interval and a cycle
        expired = beat.last_modified_time + S.heartbeat_expiry
        detected = min(t for t in store.listed if t > expired)
        assert g.loop.time() - detected <= S.heartbeat_interval + 2 * S.interval
        # and each of c's partitions moved once; nobody handed any on
        claimed, released = _moves(g)
        assert sorted(claimed) == sorted(theirs) and released == []
        await g.close()
    virtual(main())


def test_an_idle_instance_woken_through_the_store_balances_at_its_next_heartbeat():
    async def main() -> None:
        g = await _idle_group()
        b = g.managers["b"]
        # When another instance wakes "b" through the store
        [listed] = [h for h in await g.store.list_heartbeats(GROUP) if h.instance_id == "b"]
        await g.store.wake([listed])
        # Then "b" comes to fast cycles at its next heartbeat, and goes idle again
        woke = await g.until(lambda: not b.idle, S.heartbeat_interval + 0.1)
        assert woke <= S.heartbeat_interval + 0.1
        slept = await g.until(lambda: b.idle, (S.settle_cycles + 1) * S.interval)
        assert slept <= (S.settle_cycles + 1) * S.interval
        await g.close()
    virtual(main())


def test_without_wakes_a_graceful_stop_still_converges_passing_partitions_on():
    async def main() -> None:
        g = await _idle_group(wakes=False)
        stay = tuple(x for x in NAMES if x != "c")
        leaver = g.managers["c"]
        theirs = set(leaver.owned)
        await g.cancel("c")
        await leaver.stop()
        # The store cannot wake them: survivors come on their idle turns, one after
        # another, and whoever polls first takes c's partitions to pass them on
        await g.until(lambda: g.balanced(stay), 6 * S.idle_interval)
        claimed, _ = _moves(g)
        assert set(claimed) >= theirs
        records = {o.partition_id: o.owner_id for o in await g.store.list_ownership(GROUP)}
        assert set(records.values()) <= set(stay)
        assert any(h.instance_id == "c" + LEFT_SUFFIX
                   for h in await g.store.list_heartbeats(GROUP))
        await g.close()
    virtual(main())


class OldStore(InMemoryCheckpointStore):
    """A third-party store from before wakes: its heartbeat returns nothing."""

    supports_wake = False

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        await super().heartbeat(heartbeat)
        return None  # type: ignore[return-value]


def test_a_store_from_before_wakes_still_balances():
    async def main() -> None:
        g = Group16(OldStore(clock=asyncio.get_running_loop().time))
        for name in NAMES:
            g.start(name)
        await g.until(lambda: g.balanced(NAMES) and all(m.idle for m in g.managers.values()),
                      30)
        await g.cancel("e")
        await g.until(lambda: g.balanced(NAMES[:-1]), S.heartbeat_expiry + 6 * S.idle_interval)
        # Then the survivors own every partition between them, none twice
        owners = {o.partition_id: o.owner_id for o in await g.store.list_ownership(GROUP)}
        assert set(owners.values()) <= set(NAMES[:-1]) and g.balanced(NAMES[:-1])
        await g.close()
    virtual(main())
