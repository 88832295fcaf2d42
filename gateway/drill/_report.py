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

__all__ = ["HUNG_SEND_LIMIT", "DrillCounters", "DrillReport"]

#: The longest the sends made while a namespace hangs may take, at p99.
HUNG_SEND_LIMIT = 1.0


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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(dataclasses.replace(self, timeline=None))
        del data["timeline"]
        data["passed"] = self.passed
        data["failovers"] = self.failovers
        data["failover_p99_seconds"] = self.failover_p99
        data["hung_send_p99_seconds"] = self.hung_send_p99
        data["first_hung_send_seconds"] = (self.hung_send_seconds[0]
                                           if self.hung_send_seconds else None)
        return data


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
        self.last_replay_at: float | None = None
        self.timeline = timeline

    def on_buffered(self, *, destination: str, count: int) -> None:
        self.buffered += count
        if self.timeline is not None:
            self.timeline.add_backlog(count)
            self.timeline.add_sent([BUFFERED], count)

    def on_replayed(self, *, destination: str, count: int, seconds: float) -> None:
        self.replayed += count
        self.last_replay_at = time.monotonic()
        if self.timeline is not None:
            self.timeline.add_backlog(-count)
            self.timeline.add_sent([REPLAYED], count)

    def on_failover(self, *, from_namespace: str, to_namespace: str, at: float) -> None:
        self.role_swaps += 1
