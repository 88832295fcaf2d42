"""The ownership manager: the thin async driver around ``balance``.

One loop per instance. A *full* cycle heartbeats, lists heartbeats and ownership,
runs ``balance``, checkpoints and releases what it hands over, then renews and
claims in one ``claim_ownership`` batch. While anything moves, full cycles run every
``interval``. Once the group has been balanced for ``settle_cycles`` cycles the
instance goes idle: it heartbeats every ``heartbeat_interval`` and, on its turn
(instances take turns, one every ``idle_interval`` for the whole group), lists the
heartbeats only; a change of members wakes it into full cycles again, and so does
a wake from another instance (``CheckpointStore.wake``), which it notices at its
next heartbeat write. An instance that sees others must act (a member joined, left
or died) wakes the idle ones, once per heartbeat they write, so the whole group
rebalances within about one ``heartbeat_interval`` of the first to notice.

A graceful ``stop()`` hands over without a gap: it announces the leave (a
``#leaving`` heartbeat), keeps reading while the others notice and come to fast
cycles, and releases each partition (checkpoint first) only to an instance that
will claim it within one interval: the one it is dealt to, so that it moves once.
Partitions nobody takes within ``handover_timeout`` are released for anyone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from gateway.consumer._balance import (
    LEAVING_SUFFIX,
    LEFT_SUFFIX,
    SUFFIXES,
    BalanceDecision,
    BalanceSettings,
    BalanceView,
    balance,
    live_instances,
)
from gateway.consumer._records import ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import CheckpointStore
from replication import ConfigError, StoreUnavailable

__all__ = ["OwnershipManager", "PartitionCallback"]

_LOGGER = logging.getLogger(__name__)

PartitionCallback = Callable[[str], Awaitable[None]]
ErrorCallback = Callable[[BaseException], Awaitable[None]]
PartitionIds = Sequence[str] | Callable[[], Awaitable[Sequence[str]]]


async def _nothing(partition_id: str) -> None:
    return None


async def _ignore(error: BaseException) -> None:
    return None


class OwnershipManager:
    """Claims, keeps and hands over partitions of one consumer group for one instance.

    Args:
        store: the checkpoint store (ownership, heartbeats, checkpoints).
        group: the consumer group of the entity.
        partition_ids: the entity's partition ids, or an async function returning them.
        instance_id: a stable id (static membership): an instance restarted under
            the same id takes back the records that still name it at once. A random
            id when omitted.
        settings: intervals and expiries; ``BalanceSettings()`` by default.
        clock: current time on the store's time scale (``last_modified_time``).
        sleep: how to wait; inject a virtual one in tests.
        rng: the only randomness used (which partitions to hand over).
        on_claimed: called after a partition is won (start reading it, with an
            owner level).
        before_release: called before a partition is handed over (stop reading,
            checkpoint); if it raises, the partition is kept this cycle.
        on_released: called after a hand-over was written.
        on_lost: called when a partition was lost without a hand-over (taken over
            after this instance looked dead, or its heartbeats could not be written).
        on_error: called with every store error (heartbeat, listing, claim, release,
            recording the leave), which is also logged, and with every failure of
            ``partition_ids`` (logged at debug only: the caller reports it); the step
            is retried later.
    """

    def __init__(
        self,
        store: CheckpointStore,
        group: ConsumerGroupRef,
        partition_ids: PartitionIds,
        *,
        instance_id: str | None = None,
        settings: BalanceSettings | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        on_claimed: PartitionCallback = _nothing,
        before_release: PartitionCallback = _nothing,
        on_released: PartitionCallback = _nothing,
        on_lost: PartitionCallback = _nothing,
        on_error: ErrorCallback = _ignore,
    ) -> None:
        instance_id = uuid.uuid4().hex if instance_id is None else instance_id
        if not instance_id or instance_id.endswith(SUFFIXES):
            raise ConfigError(f"instance_id must be non-empty and not end with "
                              f"{' or '.join(map(repr, SUFFIXES))}: {instance_id!r}")
        self._store = store
        self._group = group
        self._partition_source = partition_ids
        self._partitions: tuple[str, ...] | None = None
        self._me = instance_id
        self._settings = settings or BalanceSettings()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._on_claimed = on_claimed
        self._before_release = before_release
        self._on_released = on_released
        self._on_lost = on_lost
        self._on_error = on_error
        self._held: dict[str, str] = {}  # partition id -> etag of the record we wrote
        self._last_beat_sent = -math.inf
        self._next_beat = -math.inf
        self._live: tuple[str, ...] = ()
        self._settled_cycles = 0
        self._stopping = False
        self._leaving = False
        self._beats: dict[str, tuple[float, ...]] = {}  # last distinct heartbeat times
        self._woke: dict[str, float | None] = {}  # instance -> its heartbeat time, as woken

    @property
    def instance_id(self) -> str:
        return self._me

    @property
    def owned(self) -> frozenset[str]:
        """The partitions this instance holds (and reads) now."""
        return frozenset(self._held)

    @property
    def idle(self) -> bool:
        """True once the group has been balanced for ``settle_cycles`` cycles."""
        return self._settled_cycles >= self._settings.settle_cycles

    async def run(self) -> None:
        """Balance until ``stop()``. Store errors are logged and retried next cycle.

        Cancelling the task running this ends it without releasing anything (as a
        crash would); ``stop()`` is the graceful way out.
        """
        next_poll = -math.inf
        while not self._stopping:
            now = self._clock()
            if self.idle and now < next_poll:
                await self._heartbeat_if_due(now)
            elif self.idle:
                await self._idle_poll()
            else:
                await self.run_once()
            now = self._clock()
            if self.idle and now >= next_poll:
                next_poll = self._next_turn(now)
            await self._fence(now)
            wake = now + self._settings.interval
            if self.idle:
                wake = min(next_poll, self._next_beat)
            if self._held:
                wake = min(wake, self._fence_deadline() + 1e-6)
            await self._sleep(max(0.0, wake - now))

    async def run_once(self) -> BalanceDecision | None:
        """One full cycle: heartbeat, list, balance, hand over, renew and claim.

        Returns:
            The decision taken, or None if the store or the partition lookup failed
            (retried next cycle).
        """
        listing = False
        try:
            # Heartbeats every cycle say "I poll now, hand me partitions". Once the
            # group looks settled they stop (back to every heartbeat_interval), so
            # by the time this instance goes idle nobody takes it for a fast poller.
            if (self._settled_cycles == 0 or self._clock() >= self._next_beat) \
                    and await self._beat():
                self._settled_cycles = 0  # someone wants this instance in fast cycles
            listing = self._partitions is None
            view = await self._read_view()
        except Exception as exc:
            if listing and self._partitions is None:
                # The entity's namespace failed, not the store: on_error reports it
                # (the geo receiver once per outage), not a traceback every cycle.
                _LOGGER.debug("%s: listing the partitions failed, retrying next cycle: %s",
                              self._me, exc)
            else:
                self._failed("a balancing cycle (retried next cycle)", exc)
            self._settled_cycles = 0
            await self._report(exc)
            return None
        now = self._clock()
        decision = balance(view, me=self._me, now=now, rng=self._rng,
                           settings=self._settings, held=self._held,
                           active=self._polling_now(view.heartbeats, now),
                           leaving=self._leaving, wakes=self._store.supports_wake)
        self._live = decision.live
        for pid in decision.lost:
            await self._drop(pid, self._on_lost)
        await self._hand_over(decision.releases)
        await self._claim(decision.renewals + decision.claims)
        await self._wake(decision.wake, view.heartbeats)
        self._settled_cycles = self._settled_cycles + 1 if decision.settled else 0
        return decision

    async def stop(self, *, handover_timeout: float | None = None) -> None:
        """Leave gracefully, handing every partition over without a gap.

        Announces the leave and keeps reading (full cycles every ``interval``)
        while the other instances notice and come to fast cycles; each partition is
        handed over (``before_release``: stop reading, checkpoint; then release)
        only to an instance that needs it and polls now, so it is read again within
        about one interval. With no other live instance, or once ``handover_timeout``
        (default ``settings.handover_timeout``) has passed, what is still held is
        handed over for anyone to claim. Then the leave is recorded.

        Call it after the task running ``run()`` was cancelled or has returned; a
        store error is logged and the records are left to expire.

        Args:
            handover_timeout: seconds to wait for takers; 0 releases everything at once.
        """
        self._stopping = True
        self._leaving = True
        if handover_timeout is None:
            handover_timeout = self._settings.handover_timeout
        deadline = self._clock() + handover_timeout
        while self._held and self._clock() < deadline:
            decision = await self.run_once()
            if decision is None or not set(decision.live) - {self._me}:
                break  # the store fails, or there is nobody else to hand over to
            now = self._clock()
            await self._fence(now)
            wake = min(now + self._settings.interval, deadline)
            if self._held:
                wake = min(wake, self._fence_deadline() + 1e-6)
            await self._sleep(max(0.0, wake - now))
        await self._hand_over(tuple(sorted(self._held)))
        try:
            await self._store.heartbeat(self._heartbeat(self._me + LEFT_SUFFIX))
        except Exception as exc:
            self._failed("recording the leave", exc)
            await self._report(exc)

    # -- steps ------------------------------------------------------------------

    async def _idle_poll(self) -> None:
        try:
            await self._heartbeat_if_due(self._clock())
            beats = await self._store.list_heartbeats(self._group)
        except Exception as exc:
            self._failed("listing heartbeats", exc)
            await self._report(exc)
            return
        view = BalanceView(group=self._group, partition_ids=(), heartbeats=tuple(beats))
        self._polling_now(view.heartbeats, self._clock())
        live = live_instances(view, me=self._me, now=self._clock(), settings=self._settings)
        if live != self._live:
            # Someone joined, left or died: balance at once, then keep cycling fast.
            self._settled_cycles = 0
            await self.run_once()

    async def _heartbeat_if_due(self, now: float) -> None:
        if now >= self._next_beat:
            try:
                woken = await self._beat()
            except Exception as exc:
                self._failed("a heartbeat", exc)
                await self._report(exc)
                return
            if woken:
                # Another instance saw that this one must act: balance now, and keep
                # cycling fast (its next heartbeat, at once, says it polls now).
                self._settled_cycles = 0
                await self.run_once()

    async def _beat(self) -> bool:
        """Write this instance's heartbeat; True if another instance woke it."""
        sent = self._clock()
        # A failed heartbeat is retried after one interval, not at once.
        self._next_beat = sent + self._settings.interval
        me = self._me + LEAVING_SUFFIX if self._leaving else self._me
        stored = await self._store.heartbeat(self._heartbeat(me))
        self._last_beat_sent = sent
        self._next_beat = sent + self._settings.heartbeat_interval
        # (A store written before wakes existed may return its own record, or nothing.)
        return getattr(stored, "woken", False) is True

    async def _wake(self, ids: Sequence[str], beats: Sequence[Heartbeat]) -> None:
        # Once per heartbeat it writes: a woken instance beats again at once, so a
        # second wake goes out only if it is still idle after a heartbeat of its own.
        listed = {hb.instance_id: hb for hb in beats}
        self._woke = {x: at for x, at in self._woke.items() if x in listed}
        due = [listed[x] for x in ids
               if x in listed and self._woke.get(x, math.nan) != listed[x].last_modified_time]
        if not due or not self._store.supports_wake:
            return
        try:
            await self._store.wake(due)
        except Exception as exc:
            self._failed("a wake", exc)
            await self._report(exc)
            return
        self._woke.update((hb.instance_id, hb.last_modified_time) for hb in due)

    async def _read_view(self) -> BalanceView:
        if self._partitions is None:
            source = self._partition_source
            ids = await source() if callable(source) else source
            self._partitions = tuple(ids)
        beats = await self._store.list_heartbeats(self._group)
        ownerships = await self._store.list_ownership(self._group)
        return BalanceView(group=self._group, partition_ids=self._partitions,
                           ownerships=tuple(ownerships), heartbeats=tuple(beats))

    async def _hand_over(self, partition_ids: Sequence[str]) -> None:
        releases = []
        for pid in partition_ids:
            try:
                await self._before_release(pid)
            except Exception:
                _LOGGER.warning("%s: before_release(%s) failed; keeping it", self._me, pid,
                                exc_info=True)
                continue
            releases.append(self._record(pid, owner_id="", etag=self._held.pop(pid)))
        if not releases:
            return
        try:
            # A release is a claim by nobody, on the etag we hold (as the SDK does).
            await self._store.claim_ownership(releases)
        except Exception as exc:
            # The record may still name us: the next cycle renews it and calls
            # on_claimed again, or another instance takes it once we look dead.
            self._failed("a release", exc)
            await self._report(exc)
        for record in releases:
            await self._call(self._on_released, record.partition_id)

    async def _claim(self, claims: Sequence[Ownership]) -> None:
        if not claims:
            return
        try:
            won = await self._store.claim_ownership(claims)
        except Exception as exc:
            # Never taken as won; renewals of partitions we hold stay held.
            self._failed("a claim", exc)
            await self._report(exc)
            return
        for record in won:
            if record.owner_id != self._me or record.etag is None:
                continue
            new = record.partition_id not in self._held
            self._held[record.partition_id] = record.etag
            if new:
                await self._call(self._on_claimed, record.partition_id)

    async def _drop(self, pid: str, callback: PartitionCallback) -> None:
        if self._held.pop(pid, None) is not None:
            await self._call(callback, pid)

    async def _fence(self, now: float) -> None:
        # Others may claim our partitions once our heartbeat expires: stop first.
        if self._held and now > self._fence_deadline():
            _LOGGER.warning("%s: no heartbeat for %.1f s; dropping partitions", self._me,
                            now - self._last_beat_sent)
            lost = tuple(self._held)
            self._held.clear()
            self._settled_cycles = 0
            for pid in lost:
                await self._call(self._on_lost, pid)

    def _fence_deadline(self) -> float:
        s = self._settings
        return self._last_beat_sent + s.heartbeat_expiry - s.fence_margin

    def _polling_now(self, beats: Sequence[Heartbeat], now: float) -> set[str]:
        # An instance in fast cycles heartbeats every cycle, an idle one every
        # heartbeat_interval: two beats close together mean it polls now, so a
        # partition handed over to it will not wait for its idle turn. (An instance
        # about to go idle stops beating every cycle settle_cycles - 1 cycles early.)
        fast = 2 * self._settings.interval
        recent = 1.5 * self._settings.interval
        active = set()
        for hb in beats:
            if hb.last_modified_time is None:
                continue
            seen = self._beats.get(hb.instance_id, ())
            if not seen or seen[-1] != hb.last_modified_time:
                seen = (*seen[-1:], hb.last_modified_time)
                self._beats[hb.instance_id] = seen
            if len(seen) == 2 and seen[1] - seen[0] <= fast and now - seen[1] <= recent:
                active.add(hb.instance_id)
        return active

    def _next_turn(self, now: float) -> float:
        # Instances take turns: slot k belongs to live rank k % n, so the group as a
        # whole lists once per idle_interval, whatever its size.
        live = self._live or (self._me,)
        n, rank = len(live), live.index(self._me) if self._me in live else 0
        slot = math.floor(now / self._settings.idle_interval) + 1
        slot += (rank - slot) % n
        return slot * self._settings.idle_interval

    async def _call(self, callback: PartitionCallback, pid: str) -> None:
        try:
            await callback(pid)
        except Exception:
            _LOGGER.warning("%s: callback %r failed for partition %s", self._me, callback,
                            pid, exc_info=True)

    def _failed(self, what: str, exc: BaseException) -> None:
        # An unavailable store says so itself, once per outage, and on_error hears of
        # each failure: a traceback every cycle would say nothing more.
        if isinstance(exc, StoreUnavailable):
            _LOGGER.debug("%s: %s failed: %s", self._me, what, exc)
        else:
            _LOGGER.warning("%s: %s failed", self._me, what, exc_info=exc)

    async def _report(self, error: BaseException) -> None:
        try:
            await self._on_error(error)
        except Exception:
            _LOGGER.warning("%s: on_error failed", self._me, exc_info=True)

    def _heartbeat(self, instance_id: str) -> Heartbeat:
        g = self._group
        return Heartbeat(fully_qualified_namespace=g.fully_qualified_namespace,
                         eventhub_name=g.eventhub_name, consumer_group=g.consumer_group,
                         instance_id=instance_id)

    def _record(self, pid: str, *, owner_id: str, etag: str | None) -> Ownership:
        g = self._group
        return Ownership(fully_qualified_namespace=g.fully_qualified_namespace,
                         eventhub_name=g.eventhub_name, consumer_group=g.consumer_group,
                         partition_id=pid, owner_id=owner_id, etag=etag)

