"""The pure core of partition balancing: one function, no I/O, clock and rng passed in.

``balance`` reads a snapshot of the store (ownership records, heartbeats, partition
ids) and says what one instance should do in this cycle: which partitions to claim,
which records naming it to renew, which partitions to hand over (checkpoint, then
release) and which it has lost. ``OwnershipManager`` in ``_ownership.py`` is the
thin driver that does the I/O around it.

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
  A leaving instance hands everything to whoever polls now, even over its share.
* Orphans (no record, released, dead or departed owner) go first to whoever needs
  them; what nobody active needs is claimed by whoever sees it first, so a crashed
  instance's partitions are re-owned at the first poll after its heartbeat expires.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping
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
    ``lost`` are partitions held locally whose record names someone else now.
    """

    claims: tuple[Ownership, ...] = ()
    renewals: tuple[Ownership, ...] = ()
    releases: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    targets: Mapping[str, int] = field(default_factory=dict)
    settled: bool = False


def live_instances(
    view: BalanceView, *, me: str, now: float, settings: BalanceSettings
) -> tuple[str, ...]:
    """The ids that count for fair shares, sorted: fresh heartbeats, heartbeat-less
    owners of fresh records, and ``me``; not those leaving."""
    alive, leaving = _liveness(view, now, settings)
    return tuple(sorted((alive - leaving) | {me}))


def leaving_instances(
    view: BalanceView, *, now: float, settings: BalanceSettings
) -> tuple[str, ...]:
    """The ids still alive but handing their partitions over (a graceful stop)."""
    return tuple(sorted(_liveness(view, now, settings)[1]))


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
) -> BalanceDecision:
    """Decide one instance's claims, renewals and hand-overs for this cycle.

    Args:
        view: ownerships, heartbeats and partition ids as just read from the store.
        me: this instance's id.
        now: the current time, on the store's clock scale.
        rng: the only source of randomness (which orphan, which partition to hand over).
        settings: expiries and intervals.
        held: partition id -> etag this process holds (what it is reading now).
        active: instances known to be polling fast now (the driver sees their
            heartbeats come every cycle); by default, those whose heartbeat is
            younger than two intervals.
        leaving: ``me`` is stopping: its target is zero, it claims nothing and
            hands what it holds to active instances that need partitions.

    Returns:
        The decision; deterministic for a given view, ``now`` and rng state.
    """
    held = held or {}
    alive, departing = _liveness(view, now, settings)
    alive.add(me)
    departing = departing | {me} if leaving else departing - {me}
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
    wanted_by_active = sum(d for x, d in deficit.items() if x != me and x in active)
    if leaving and any(x in active for x in live):
        # Whoever polls now takes all of it, over its share if need be; it hands
        # the surplus on as the others wake up. A stop does not wait for them all.
        wanted_by_active = counts[me]

    mine = sorted(p for p, o in owner_of.items() if o == me)
    renewals = tuple(
        records[p] for p in mine if held.get(p) != records[p].etag
    )
    lost = tuple(sorted(p for p in held if owner_of.get(p) != me))

    releases: tuple[str, ...] = ()
    surplus = counts[me] - targets[me]
    if surplus > 0 and wanted_by_active > 0:
        releases = tuple(sorted(rng.sample(mine, min(surplus, wanted_by_active))))
        renewals = tuple(r for r in renewals if r.partition_id not in releases)

    orphans = [p for p in pids if p not in owner_of]
    take = 0 if leaving else min(len(orphans),
                                 max(deficit[me], len(orphans) - wanted_by_active))
    claims = tuple(
        _claim(view.group, records.get(p), p, me) for p in sorted(rng.sample(orphans, take))
    )
    settled = not orphans and all(counts[x] == targets[x] for x in live) and not (
        claims or releases or renewals or lost
    )
    return BalanceDecision(claims=claims, renewals=renewals, releases=releases, lost=lost,
                           live=live, targets=targets, settled=settled)


def _liveness(
    view: BalanceView, now: float, settings: BalanceSettings
) -> tuple[set[str], set[str]]:
    """(alive, leaving): leaving ones are alive, still hold their partitions, and
    want none."""
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
    return alive, leaving & alive


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
