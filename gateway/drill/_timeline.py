"""What happened when during a drill: the timeline its picture is drawn from.

Recording is cheap (a float appended per message sent or delivered, one tuple per
fault, failover, buffering or replay), so every drill records. Times are seconds from
the start of the drill's sends (``time.monotonic``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.geo import GatewayHooks

__all__ = ["BUFFERED", "REPLAYED", "DrillTimeline", "DuplicateRecorder", "Window"]

#: The series of ``sent`` that are not a namespace: into and out of the durable queue.
BUFFERED, REPLAYED = "durable queue (buffered)", "durable queue (replayed)"


@dataclass(frozen=True)
class Window:
    """A stretch of the drill during which a namespace was down, hung or lost replies."""

    namespace: str
    kind: str  # "down", "hang" or "lost replies"
    start: float
    end: float
    #: False when the fault was still on when the drill ended (``end`` is the drill's).
    ended: bool = True


@dataclass
class DrillTimeline:
    """The events of one drill, by the second.

    Args:
        sent: per namespace (and :data:`BUFFERED`, :data:`REPLAYED`), when each message
            was taken.
        delivered: per namespace, when each message was delivered from it.
        duplicates: when each duplicate copy was suppressed.
        backlog: (time, messages waiting in the durable queue) after each change.
        faults: (time, action, namespace) of each fault injected or cleared.
        failovers: (time, seconds) of each failover: when the send that moved to the
            other namespace returned, and how long the failover took.
        end: when the drill ended.
        delivered_label: what the keys of ``delivered`` are: "delivered from" a
            namespace, or (the consumer drills) "delivered by" a worker process.
    """

    sent: dict[str, list[float]] = field(default_factory=dict)
    delivered: dict[str, list[float]] = field(default_factory=dict)
    duplicates: list[float] = field(default_factory=list)
    backlog: list[tuple[float, int]] = field(default_factory=list)
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    failovers: list[tuple[float, float]] = field(default_factory=list)
    end: float = 0.0
    delivered_label: str = "delivered from"
    started: float = field(default_factory=time.monotonic, repr=False)

    def now(self) -> float:
        """Seconds since the drill started."""
        return time.monotonic() - self.started

    def add_sent(self, namespaces: Iterable[str], count: int) -> None:
        """``count`` messages were taken by each of ``namespaces``, now."""
        now = self.now()
        for ns in namespaces:
            self.sent.setdefault(ns, []).extend([now] * count)

    def add_delivered(self, namespace: str) -> None:
        """One message was delivered from ``namespace``, now."""
        self.delivered.setdefault(namespace, []).append(self.now())

    def add_backlog(self, change: int) -> None:
        """The durable queue's backlog changed by ``change`` messages, now."""
        waiting = (self.backlog[-1][1] if self.backlog else 0) + change
        self.backlog.append((self.now(), max(0, waiting)))

    def add_fault(self, action: str, namespace: str) -> None:
        """A fault was injected or cleared (``down``, ``up``, ``hang``, ``unhang``,
        ``lose``, ``heal``), or a worker process acted on (``kill``, ``term``,
        ``start``), now."""
        self.faults.append((self.now(), action, namespace))

    def add_failover(self, seconds: float) -> None:
        """A failover that took ``seconds`` ended now."""
        self.failovers.append((self.now(), seconds))

    def finish(self) -> None:
        """The drill ended now."""
        self.end = self.now()

    def events(self) -> list[tuple[float, str, str]]:
        """The faults that are moments, not windows: a worker killed, stopped or started."""
        return [f for f in self.faults if f[1] in ("kill", "term", "start")]

    def windows(self) -> list[Window]:
        """The outage windows: each namespace's stretches down, hung or losing replies
        (one still open at the end of the faults closes at the end of the drill)."""
        opened: dict[tuple[str, str], float] = {}
        closes = {"up": ("down", "hang"), "unhang": ("hang",), "heal": ("lost replies",)}
        kinds = {"down": "down", "hang": "hang", "lose": "lost replies"}
        found = []
        for at, action, ns in self.faults:
            if action in kinds:
                opened.setdefault((ns, kinds[action]), at)
            for kind in closes.get(action, ()):
                start = opened.pop((ns, kind), None)
                if start is not None:
                    found.append(Window(ns, kind, start, at))
        found += [Window(ns, kind, start, max(self.end, start), ended=False)
                  for (ns, kind), start in opened.items()]
        return sorted(found, key=lambda w: (w.start, w.namespace))

    def to_dict(self) -> dict[str, Any]:
        """The timeline as JSON-ready data (times rounded to the millisecond)."""
        def ms(values: Iterable[float]) -> list[float]:
            return [round(v, 3) for v in values]

        return {
            "sent": {k: ms(v) for k, v in self.sent.items()},
            "delivered": {k: ms(v) for k, v in self.delivered.items()},
            "duplicates": ms(self.duplicates),
            "backlog": [[round(t, 3), n] for t, n in self.backlog],
            "faults": [[round(t, 3), a, ns] for t, a, ns in self.faults],
            "failovers": [[round(t, 3), s] for t, s in self.failovers],
            "end": round(self.end, 3),
            "delivered_label": self.delivered_label,
        }


class DuplicateRecorder(GatewayHooks):
    """A receiver's hooks that put each suppressed duplicate on the timeline."""

    def __init__(self, timeline: DrillTimeline) -> None:
        self.timeline = timeline

    def on_duplicate(self, *, message_id: str, namespace: str) -> None:
        self.timeline.duplicates.append(self.timeline.now())
