"""The pure core of partition balancing: one function, no I/O, clock and rng passed in.

``balance`` reads a snapshot of the store (ownership records, heartbeats, partition
ids) and says what one instance should do in this cycle: which partitions to claim,
which records naming it to renew, which partitions to hand over (checkpoint, then
release), which it has lost, and which idle instances to wake. ``OwnershipManager``
in ``_ownership.py`` is the thin driver that does the I/O around it.

Rules, in order:

* Liveness comes from heartbeats, so an instance that owns nothing is counted. An
  owner with no heartbeat at all (an ``azure-eventhub`` consumer, an old record)
  is alive while its record is younger than ``ownership_expiry``. A heartbeat
  under ``<id>#leaving`` newer than ``<id>``'s own means it is leaving: it keeps
  its partitions (and reads them) until it hands them over, but its target is
  zero. One under ``<id>#left`` newer than both means it has left.
* Targets: with P partitions and N live instances each gets P // N, and P % N of
  them get one more. Every instance ranks the live ids the same way (those already
  holding more first, then by id), so all agree on who gets the extra one.
* Never take a partition from a live owner. An instance over its target hands
  partitions over itself, and only to instances that are polling now (their
  heartbeat is recent), so a released partition is picked up within one cycle.
* Free partitions (orphans: no record, released, dead or departed owner; and those
  a leaving instance still holds) are dealt out in partition order to the live
  instances under their target, in id order, each getting its shortfall: every
  instance reading the same view computes the same deal, so each free partition
  moves once, straight to the instance that keeps it. An instance claims the
  orphans dealt to it; a leaving one releases a partition as soon as the instance
  it is dealt to polls now.
* Instances that must act (under or over their target) but are idle are named in
  ``wake``; the driver asks the store to wake them, and each notices at its next
  heartbeat write. With ``wakes`` (a store that carries wakes), an orphan dealt to
  an idle instance waits for it, up to ``BalanceSettings.wake_grace`` after it
  became free; then whoever sees it first claims it. Without, whoever polls now
  takes it at once (and a leaver hands everything to whoever polls now), passing
  the surplus on later as the others wake.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.consumer._records import ConsumerGroupRef, Heartbeat, Ownership
from replication import ConfigError

__all__ = [
    "LEAVING_SUFFIX",
    "LEFT_SUFFIX",
    "BalanceDecision",
    "BalanceSettings",
    "BalanceView",
    "balance",
]

LEFT_SUFFIX = "#left"
"""A heartbeat under ``instance_id + LEFT_SUFFIX`` marks a graceful leave."""
LEAVING_SUFFIX = "#leaving"
"""Heartbeats under ``instance_id + LEAVING_SUFFIX``: handing its partitions over."""
SUFFIXES = (LEFT_SUFFIX, LEAVING_SUFFIX)
"""Both heartbeat suffixes: an instance id ending in one is not a live member."""


@dataclass(frozen=True, kw_only=True)
class BalanceSettings:
    """How often the ownership manager polls and when an owner counts as dead.

    Steady-state store traffic with the defaults, per consumer group: one heartbeat
    write per instance every ``heartbeat_interval`` (5 instances: 54.5 writes a
    minute) and one heartbeat list every ``idle_interval`` for the whole group
    (8.6 lists a minute), whatever the number of partitions.

    Args:
        interval: seconds between cycles while anything is moving (claims,
            releases, a member joining or leaving).
        idle_interval: in steady state the group lists heartbeats once per
            ``idle_interval``: instances take turns, in the order of their ids.
        heartbeat_interval: seconds between heartbeat writes in steady state.
        heartbeat_expiry: an instance whose heartbeat is older than this is dead,
            and its partitions may be claimed.
        ownership_expiry: for owners that write no heartbeat (e.g. azure-eventhub
            consumers), a record older than this is dead; the SDK's default is
            six times its 30 s load-balancing interval.
        settle_cycles: consecutive balanced cycles before going idle, so that
            instances starting together all see each other first.
        fence_margin: an instance whose last heartbeat write is older than
            ``heartbeat_expiry - fence_margin`` drops its partitions itself, before
            others may claim them.
        handover_timeout: how long a graceful stop keeps reading its partitions
            while it waits for the others to take them over; whatever is still
            held then is checkpointed and released for anyone to claim.

    Raises:
        ConfigError: a value is not positive, or the heartbeat settings could let a
            live instance look dead.
    """

    interval: float = 1.0
    idle_interval: float = 7.0
    heartbeat_interval: float = 5.5
    heartbeat_expiry: float = 12.0
    ownership_expiry: float = 180.0
    settle_cycles: int = 3
    fence_margin: float = 1.0
    handover_timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in ("interval", "idle_interval", "heartbeat_interval", "heartbeat_expiry",
                     "ownership_expiry", "fence_margin", "handover_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"BalanceSettings.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"BalanceSettings.{name} must be > 0, got {value!r}")
        if isinstance(self.settle_cycles, bool) or not isinstance(self.settle_cycles, int) \
                or self.settle_cycles < 1:
            raise ConfigError(f"BalanceSettings.settle_cycles must be an int >= 1, "
                              f"got {self.settle_cycles!r}")
        if self.heartbeat_expiry < 2 * self.heartbeat_interval:
            raise ConfigError("BalanceSettings.heartbeat_expiry must be at least twice "
                              "heartbeat_interval, or one late heartbeat looks like a crash")
        if self.heartbeat_expiry <= self.fence_margin + self.heartbeat_interval:
            raise ConfigError("BalanceSettings.fence_margin leaves no time to heartbeat")
        if self.heartbeat_expiry < 3 * self.interval:
            raise ConfigError("BalanceSettings.heartbeat_expiry must be at least three "
                              "intervals")

    @property
    def wake_grace(self) -> float:
        """Seconds a free partition waits for the idle instance it is dealt to.

        Counted from when it became free (released, or its owner's heartbeat
        expired). The first instance to see it free does so on its idle turn (the
        group lists once per ``idle_interval``; two if the dead one's turn comes
        first), wakes the others, and each notices at its next heartbeat: so a woken
        instance claims it well within this, and past it anyone may (21.5 s with
        the defaults).
        """
        return 2 * self.idle_interval + self.heartbeat_interval + 2 * self.interval


@dataclass(frozen=True, kw_only=True)
class BalanceView:
    """One snapshot of the store for one consumer group."""

    group: ConsumerGroupRef
    partition_ids: tuple[str, ...]
    ownerships: tuple[Ownership, ...] = ()
    heartbeats: tuple[Heartbeat, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BalanceDecision:
    """What one instance does in one cycle.

    ``claims`` and ``renewals`` carry the etag as read, so the store's compare-and-
    swap decides; ``releases`` are partitions to checkpoint, then release;
    ``lost`` are partitions held locally whose record names someone else now;
    ``wake`` are idle live instances (with heartbeats) that must act: under or over
    their target.
    """

    claims: tuple[Ownership, ...] = ()
    renewals: tuple[Ownership, ...] = ()
    releases: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    wake: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    targets: Mapping[str, int] = field(default_factory=dict)
    settled: bool = False


def live_instances(
    view: BalanceView, *, me: str, now: float, settings: BalanceSettings
) -> tuple[str, ...]:
    """The ids that count for fair shares, sorted: fresh heartbeats, heartbeat-less
    owners of fresh records, and ``me``; not those leaving."""
    members = _liveness(view, now, settings)
    return tuple(sorted((members.alive - members.leaving) | {me}))


def leaving_instances(
    view: BalanceView, *, now: float, settings: BalanceSettings
) -> tuple[str, ...]:
    """The ids still alive but handing their partitions over (a graceful stop)."""
    return tuple(sorted(_liveness(view, now, settings).leaving))


def balance(
    view: BalanceView,
    *,
    me: str,
    now: float,
    rng: random.Random,
    settings: BalanceSettings,
    held: Mapping[str, str] | None = None,
    active: Collection[str] | None = None,
    leaving: bool = False,
    wakes: bool = True,
) -> BalanceDecision:
    """Decide one instance's claims, renewals, hand-overs and wakes for this cycle.

    Args:
        view: ownerships, heartbeats and partition ids as just read from the store.
        me: this instance's id.
        now: the current time, on the store's clock scale.
        rng: the only source of randomness (which partition an instance over its
            target hands over).
        settings: expiries and intervals.
        held: partition id -> etag this process holds (what it is reading now).
        active: instances known to be polling fast now (the driver sees their
            heartbeats come every cycle); by default, those whose heartbeat is
            younger than two intervals.
        leaving: ``me`` is stopping: its target is zero, it claims nothing and
            hands what it holds to the active instances they are dealt to.
        wakes: the idle instances in ``wake`` will be woken (the store carries
            wakes), so a free partition waits for the one it is dealt to (up to
            ``settings.wake_grace``) and moves once. False: whoever polls now takes
            it at once, and a leaver hands everything to whoever polls now.

    Returns:
        The decision; deterministic for a given view, ``now`` and rng state.
    """
    held = held or {}
    members = _liveness(view, now, settings)
    alive = members.alive | {me}
    departing = members.leaving | {me} if leaving else members.leaving - {me}
    live = tuple(sorted(alive - departing))
    pids = tuple(sorted(set(view.partition_ids)))
    records = {o.partition_id: o for o in view.ownerships if o.partition_id in set(pids)}
    owner_of = {p: o.owner_id for p, o in records.items() if _held(o, alive, view, now, settings)}
    counts = {x: 0 for x in alive}
    for owner in owner_of.values():
        counts[owner] += 1
    targets = _targets(len(pids), live, counts) if live else {}
    targets.update(dict.fromkeys(departing, 0))
    active = set(_active(view, now, settings) if active is None else active) | {me}
    deficit = {x: max(0, targets[x] - counts[x]) for x in live}
    orphans = [p for p in pids if p not in owner_of]
    free = [p for p in pids if p not in owner_of or owner_of[p] in departing]
    dealt = _deal(free, live, deficit)

    mine = sorted(p for p, o in owner_of.items() if o == me)
    renewals = tuple(
        records[p] for p in mine if held.get(p) != records[p].etag
    )
    lost = tuple(sorted(p for p in held if owner_of.get(p) != me))

    releases: tuple[str, ...] = ()
    if leaving:
        others_poll = any(x in active for x in live)
        releases = tuple(p for p in mine if dealt.get(p, me) in active - {me}
                         or (not wakes and others_poll))
    elif counts[me] > targets[me]:
        # What active instances still need beyond the free partitions dealt to them.
        got = {x: sum(1 for p in free if dealt.get(p) == x) for x in live}
        wanted = sum(deficit[x] - got[x] for x in live if x != me and x in active)
        if wanted > 0:
            releases = tuple(sorted(rng.sample(mine, min(counts[me] - targets[me], wanted))))
    renewals = tuple(r for r in renewals if r.partition_id not in releases)

    def takes(p: str) -> bool:
        x = dealt.get(p)
        if x == me or x is None:
            return True
        if x in active:
            return False  # it polls now: it takes it this cycle
        return not wakes or now - _free_since(records.get(p), members, settings) > \
            settings.wake_grace

    claims = () if leaving else tuple(
        _claim(view.group, records.get(p), p, me) for p in orphans if takes(p)
    )
    wake = tuple(x for x in live if x != me and x not in active and x in members.beats
                 and counts[x] != targets[x])
    settled = not orphans and all(counts[x] == targets[x] for x in live) and not (
        claims or releases or renewals or lost
    )
    return BalanceDecision(claims=claims, renewals=renewals, releases=releases, lost=lost,
                           wake=wake, live=live, targets=targets, settled=settled)


@dataclass(frozen=True)
class _Members:
    alive: set[str]
    leaving: set[str]  # alive, still holding their partitions, wanting none
    beats: dict[str, float]  # latest heartbeat (own or #leaving) by instance
    left: dict[str, float]  # #left markers by instance


def _liveness(view: BalanceView, now: float, settings: BalanceSettings) -> _Members:
    beats: dict[str, float] = {}
    marks: dict[str, dict[str, float]] = {s: {} for s in SUFFIXES}
    for hb in view.heartbeats:
        at = hb.last_modified_time if hb.last_modified_time is not None else -math.inf
        for suffix in SUFFIXES:
            if hb.instance_id.endswith(suffix):
                marks[suffix][hb.instance_id[: -len(suffix)]] = at
                break
        else:
            beats[hb.instance_id] = at
    left, leaving_at = marks[LEFT_SUFFIX], marks[LEAVING_SUFFIX]
    leaving = {x for x, at in leaving_at.items() if at > beats.get(x, -math.inf)}
    beats.update({x: leaving_at[x] for x in leaving})
    alive = {
        x for x, at in beats.items()
        if now - at <= settings.heartbeat_expiry and left.get(x, -math.inf) < at
    }
    for o in view.ownerships:
        # Owners that write no heartbeat (azure-eventhub) live by their records' age.
        if o.owner_id and o.owner_id not in beats and o.owner_id not in left:
            at = o.last_modified_time if o.last_modified_time is not None else -math.inf
            if now - at <= settings.ownership_expiry:
                alive.add(o.owner_id)
    return _Members(alive=alive, leaving=leaving & alive, beats=beats, left=left)


def _deal(free: Sequence[str], live: Sequence[str], deficit: Mapping[str, int]
          ) -> dict[str, str]:
    """Free partition -> the live instance it goes to: in partition order, to each
    instance under its target in id order, as many as it lacks. An instance that
    claims one of its own shrinks its share and the free list together, so the
    others' shares stay where they were."""
    dealt: dict[str, str] = {}
    queue = iter(free)
    for x in live:
        for p in itertools.islice(queue, deficit[x]):
            dealt[p] = x
    return dealt


def _free_since(record: Ownership | None, members: _Members,
                settings: BalanceSettings) -> float:
    """When an orphan became free: released, its owner's heartbeat expired or it
    left; -inf when there is no record (nobody has to be waited for)."""
    if record is None:
        return -math.inf
    at = record.last_modified_time if record.last_modified_time is not None else -math.inf
    owner = record.owner_id
    if not owner:
        return at
    if owner in members.beats:
        return min(members.beats[owner] + settings.heartbeat_expiry,
                   members.left.get(owner, math.inf))
    if owner in members.left:
        return members.left[owner]
    return at + settings.ownership_expiry


def _held(o: Ownership, alive: set[str], view: BalanceView, now: float,
          settings: BalanceSettings) -> bool:
    if o.owner_id not in alive:
        return False
    if any(hb.instance_id == o.owner_id for hb in view.heartbeats):
        return True
    # Without a heartbeat, each record lives by its own age, as in azure-eventhub.
    at = o.last_modified_time if o.last_modified_time is not None else -math.inf
    return now - at <= settings.ownership_expiry


def _active(view: BalanceView, now: float, settings: BalanceSettings) -> set[str]:
    # Instances in a fast cycle heartbeat every cycle: a heartbeat this recent means
    # the instance will see a released partition within about one interval.
    return {
        hb.instance_id for hb in view.heartbeats
        if hb.last_modified_time is not None
        and now - hb.last_modified_time <= 2 * settings.interval
    }


def _targets(partitions: int, live: tuple[str, ...], counts: Mapping[str, int]) -> dict[str, int]:
    base, extra = divmod(partitions, len(live))
    # Whoever already holds base+1 keeps its extra one, so shares move as little as
    # possible; ties by id, so that every instance reading the same view agrees.
    ranked = sorted(live, key=lambda x: (-min(counts[x], base + 1), x))
    return {x: base + (1 if i < extra else 0) for i, x in enumerate(ranked)}


def _claim(group: ConsumerGroupRef, record: Ownership | None, pid: str, me: str) -> Ownership:
    if record is not None:
        return record.claimed_by(me)
    return Ownership(
        fully_qualified_namespace=group.fully_qualified_namespace,
        eventhub_name=group.eventhub_name,
        consumer_group=group.consumer_group,
        partition_id=pid,
        owner_id=me,
    )
