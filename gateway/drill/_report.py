"""The report of a failover drill (:func:`gateway.drill.run_drill`).

A *failover*, in the report, is one fault (a namespace going down while the other is
up, or starting to lose replies) after which a send that the faulty namespace did not
accept was accepted by the other. ``failover_seconds`` holds one time per failover,
so ``failovers == len(failover_seconds)`` always: for an outage, from the moment the
outage is in effect to the end of that send; for lost replies, the duration of that
send (the moment a reply goes missing is not observable before it). ``role_swaps``
counts something else: the times the sender changed its active namespace (its
``on_failover`` hook), which active mode never does and passive mode does once per
outage of the active namespace only.

The drills that run processes of their own report what they did to them
(``worker_actions``: a worker killed, stopped or started) and, on a partitioned entity
(the ``consumer-*`` scenarios), the partitions that changed hands after that
(``partitions_moved``) and how long each went unread meanwhile. :meth:`DrillReport.rows`
is the report as the CLI prints it: only the facts the drill's family measures.

``hung_send_seconds`` (the ``hang`` scenario) holds how long each send started while a
namespace hung took: a hung namespace must fail over as fast as a dead one, so the
drill passes only when their p99 is within :data:`HUNG_SEND_LIMIT` seconds.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.drill._timeline import BUFFERED, REPLAYED, DrillTimeline
from gateway.geo import GatewayHooks

__all__ = ["FAMILIES", "HUNG_SEND_LIMIT", "DrillCounters", "DrillReport", "PartitionMove",
           "WorkerAction"]

#: The longest the sends made while a namespace hangs may take, at p99.
HUNG_SEND_LIMIT = 1.0
#: What a drill runs, which decides the facts it measures: senders and receivers in
#: this process ("messages": the queue, topic and session scenarios), receiver
#: processes on a partitioned entity ("consumers"), or machines sharing a store
#: ("fleet").
FAMILIES = ("messages", "consumers", "fleet")
#: What a drill did to a worker process, as its report words it.
_ACTIONS = {"kill": "killed", "term": "stopped", "start": "started"}


@dataclass(frozen=True)
class WorkerAction:
    """A worker process the drill acted on: ``killed`` (SIGKILL, as in a crash),
    ``stopped`` (SIGTERM, a graceful stop) or ``started``, ``at`` seconds into the drill."""

    worker: str
    action: str
    at: float

    @classmethod
    def from_timeline(cls, timeline: DrillTimeline) -> list[WorkerAction]:
        """The actions on workers that ``timeline`` recorded, in order."""
        return [cls(worker, _ACTIONS[action], round(at, 3))
                for at, action, worker in timeline.events()]


@dataclass(frozen=True)
class PartitionMove:
    """A partition (``NAMESPACE/ID``) that changed hands after a drill's action.

    ``at`` is when the new owner claimed it (seconds into the drill);
    ``unread_seconds`` how long it went unread: from the action that moved it, or from
    the old owner's last read when that came later (a graceful hand-over reads on
    until it lets go), to the new owner's first read. None when the new owner found
    nothing to read.
    """

    partition: str
    from_worker: str
    to_worker: str
    at: float
    unread_seconds: float | None


@dataclass(frozen=True, kw_only=True)
class DrillReport:
    """The outcome of one drill. ``passed`` is lost == 0, duplicates_delivered == 0 and
    out_of_order == 0, and, when sends were made while a namespace hung, their p99
    within :data:`HUNG_SEND_LIMIT` seconds.

    ``failovers`` is ``len(failover_seconds)`` (see the module docstring for what
    counts as one); ``role_swaps`` counts the sender's ``on_failover`` hook calls.
    ``state_dir`` is the run's state folder when it was kept, None once removed.
    ``timeline`` is what happened when (the drill's picture is drawn from it); it is
    not part of :meth:`to_dict`.
    """

    scenario: str
    mode: str
    messages: int
    sent: int
    delivered: int
    lost: int
    duplicates_delivered: int
    duplicates_suppressed: int
    buffered: int
    replayed: int
    failover_seconds: list[float] = field(default_factory=list)
    role_swaps: int = 0
    replay_seconds: float | None = None
    elapsed_seconds: float = 0.0
    transport: str = "local"
    state_dir: str | None = None
    hung_send_seconds: list[float] = field(default_factory=list)
    #: The sessions scenario: deliveries of a session that came after a later message
    #: of the same session had been delivered; and, per session, ``sent``,
    #: ``delivered``, ``lost``, ``duplicates_delivered`` and ``out_of_order``.
    out_of_order: int = 0
    per_session: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Gaps the session receivers gave up waiting for (``on_session_gap``).
    session_gaps: int = 0
    timeline: DrillTimeline | None = field(default=None, repr=False, compare=False)
    #: The receivers' shared store (the fleet and outbox drills): postgres or sqlite.
    store: str | None = None
    #: "queue", or "topic": then ``subscriptions`` holds, per subscription, its
    #: ``delivered``, ``lost``, ``duplicates_delivered`` and ``duplicates_suppressed``
    #: (``lost`` and ``duplicates_delivered`` above are their sums).
    entity: str = "queue"
    subscriptions: dict[str, dict[str, int]] = field(default_factory=dict)
    #: One of :data:`FAMILIES`: which facts this drill measures (see :meth:`rows`).
    family: str = "messages"
    #: The consumer and fleet drills: what was done to their worker processes, and
    #: (consumers) the partitions that moved after it.
    worker_actions: list[WorkerAction] = field(default_factory=list)
    partitions_moved: list[PartitionMove] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        hung = self.hung_send_p99
        return (self.lost == 0 and self.duplicates_delivered == 0 and self.out_of_order == 0
                and (hung is None or hung <= HUNG_SEND_LIMIT))

    @property
    def hung_send_p99(self) -> float | None:
        return _percentile(self.hung_send_seconds, 0.99)

    @property
    def failovers(self) -> int:
        return len(self.failover_seconds)

    @property
    def failover_p99(self) -> float | None:
        return _percentile(self.failover_seconds, 0.99)

    @property
    def longest_unread(self) -> PartitionMove | None:
        """The move after which a partition went unread the longest (None: no move
        whose new owner read anything)."""
        timed = [m for m in self.partitions_moved if m.unread_seconds is not None]
        return max(timed, key=lambda m: m.unread_seconds or 0.0, default=None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(dataclasses.replace(self, timeline=None))
        del data["timeline"]
        longest = self.longest_unread
        data["longest_unread_seconds"] = None if longest is None else longest.unread_seconds
        data["passed"] = self.passed
        data["failovers"] = self.failovers
        data["failover_p99_seconds"] = self.failover_p99
        data["hung_send_p99_seconds"] = self.hung_send_p99
        data["first_hung_send_seconds"] = (self.hung_send_seconds[0]
                                           if self.hung_send_seconds else None)
        return data

    def rows(self) -> list[tuple[str, str]]:
        """The report as (label, value) rows, in the order the CLI prints them.

        A row the drill's family does not measure is left out, not shown as 0 or ``-``:
        failovers only where the sender's failovers are timed (the message drills),
        role swaps where a passive sender may make them,
        ``replay time`` only when something was replayed, ``buffered`` and
        ``replayed`` in a consumer drill only when something was, the workers and
        partitions of the drills that run worker processes.
        """
        messages = self.family == "messages"
        rows = [("scenario", self.scenario), ("mode", self.mode), ("transport", self.transport)]
        rows += [("store", self.store)] if self.store else []
        if self.subscriptions:
            rows.append(("entity", f"topic, {len(self.subscriptions)} subscriptions"))
        rows += _rows_of([("sent", self.sent), ("delivered", self.delivered), ("lost", self.lost),
                          ("duplicates delivered", self.duplicates_delivered)])
        if self.per_session:
            rows += _rows_of([("out of order", self.out_of_order),
                              ("sessions", len(self.per_session)),
                              ("session gaps", self.session_gaps)])
        rows.append(("duplicates suppressed", str(self.duplicates_suppressed)))
        if messages or self.family == "fleet" or self.buffered or self.replayed:
            rows += _rows_of([("buffered", self.buffered), ("replayed", self.replayed)])
        if messages:
            rows.append(("failovers", str(self.failovers)))
            if self.failover_seconds:
                rows.append(("failover time", ", ".join(map(_seconds, self.failover_seconds))))
        # Only a passive sender swaps roles, and only on an outage (no consumer drill
        # has one): elsewhere a count is shown only if there was something to count.
        if (self.mode == "passive" and self.family != "consumers") or self.role_swaps:
            rows.append(("role swaps", str(self.role_swaps)))
        if self.replayed and self.replay_seconds is not None:
            rows.append(("replay time", _seconds(self.replay_seconds)))
        rows += _rows_of(self._worker_rows())
        rows += [(f"subscription {name}", f"delivered {s['delivered']}, lost {s['lost']}, "
                  f"duplicates delivered {s['duplicates_delivered']}, suppressed "
                  f"{s['duplicates_suppressed']}")
                 for name, s in sorted(self.subscriptions.items())]
        if self.hung_send_seconds:
            rows += [("sends while hung", str(len(self.hung_send_seconds))),
                     ("first send after hang", _seconds(self.hung_send_seconds[0])),
                     ("sends while hung p99", _seconds(self.hung_send_p99))]
        return [*rows, ("elapsed", _seconds(self.elapsed_seconds)), ("result", self._result())]

    def _worker_rows(self) -> list[tuple[str, object]]:
        rows: list[tuple[str, object]] = [
            (f"worker {a.action}", f"{a.worker} at {a.at:.2f} s") for a in self.worker_actions]
        if self.family != "consumers":
            return rows
        moved = ", ".join(f"{m.partition} {m.from_worker} -> {m.to_worker}"
                          for m in self.partitions_moved)
        rows.append(("partitions moved",
                     f"{len(self.partitions_moved)}" + (f" ({moved})" if moved else "")))
        longest = self.longest_unread
        if longest is not None:
            rows.append(("longest unread", f"{_seconds(longest.unread_seconds)} "
                         f"({longest.partition}, {longest.from_worker} -> {longest.to_worker})"))
        return rows

    def _result(self) -> str:
        if self.passed:
            return "PASS"
        if self.lost or self.duplicates_delivered:
            return "FAIL (lost or duplicates delivered)"
        if self.out_of_order:
            return "FAIL (delivered out of order)"
        return f"FAIL (sends while hung took over {HUNG_SEND_LIMIT:g} s at p99)"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _rows_of(pairs: list[tuple[str, object]]) -> list[tuple[str, str]]:
    return [(label, str(value)) for label, value in pairs]


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


class DrillCounters(GatewayHooks):
    """What the sender reports through its hooks during a drill (on ``timeline`` too,
    when given: the durable queue's backlog over time)."""

    def __init__(self, timeline: DrillTimeline | None = None) -> None:
        self.buffered = 0
        self.replayed = 0
        self.role_swaps = 0
        self.first_replay_at: float | None = None
        self.last_replay_at: float | None = None
        self.last_up_at: float | None = None
        self.timeline = timeline

    def replay_seconds(self, back_at: float | None = None) -> float | None:
        """How long the replay took (None: nothing was replayed): from ``back_at``
        (``time.monotonic()`` when the namespaces came back), else from the sender's
        last finding a namespace back before it replayed, else from its first replay,
        to the last message replayed."""
        if not self.replayed or self.last_replay_at is None:
            return None
        since = back_at
        if since is None and self.last_up_at is not None and (
                self.last_up_at <= self.last_replay_at):
            since = self.last_up_at
        if since is None:
            since = self.first_replay_at or self.last_replay_at
        return round(max(0.0, self.last_replay_at - since), 3)

    def on_buffered(self, *, destination: str, count: int) -> None:
        self.buffered += count
        if self.timeline is not None:
            self.timeline.add_backlog(count)
            self.timeline.add_sent([BUFFERED], count)

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        self.replayed += count
        self.last_replay_at = time.monotonic()
        if self.first_replay_at is None:
            self.first_replay_at = self.last_replay_at - seconds
        if self.timeline is not None:
            self.timeline.add_backlog(-count)
            self.timeline.add_sent([REPLAYED], count)

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.role_swaps += 1

    def on_namespace_up(self, *, namespace: str) -> None:
        self.last_up_at = time.monotonic()
