"""The queue drills over a topic: every queue scenario, with a sender on a topic and a
de-duplicating receiver on each of its two subscriptions (``--entity topic``).

Each subscription must get every message once: the report counts, per subscription,
what was delivered, lost, delivered twice and suppressed, and passes only when no
subscription lost a message or had one delivered twice. The two receivers share one
dedup store file, as receivers of several subscriptions may: what subscription ``a``
handled must not make ``b``'s copy look like a duplicate (``replication.scoped``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from gateway.drill._common import Progress, Scenario
from gateway.drill._queues import Handler, QueueDrill
from gateway.drill._report import DrillReport
from gateway.drill._timeline import DuplicateRecorder
from gateway.geo import (
    AsyncGeoPartitionReceiver,
    AsyncGeoReceiver,
    GatewayHooks,
    NamespaceLike,
)
from gateway.transports.base import ReceivedMessage
from gateway.transports.local import LocalNamespace
from replication import Mode

__all__ = ["SUBSCRIPTIONS", "TOPIC", "TopicDrill", "run_topic_drill"]

TOPIC = "drill-topic"
SUBSCRIPTIONS = ("a", "b")
_LOCK, _MAX_DELIVERIES = 5.0, 100


async def run_topic_drill(
    *, mode: Mode, scenario: Scenario, messages: int, batch_size: int, root: Path,
    settle_timeout: float, progress: Progress | None, transport: str = "local",
    hooks: Sequence[GatewayHooks] = (),
) -> DrillReport:
    """Run one queue scenario over a topic in ``root``; see :func:`gateway.drill.run_drill`."""
    drill = TopicDrill(mode, scenario, messages, batch_size, root, progress, transport, hooks)
    return await drill.run(settle_timeout)


class TopicDrill(QueueDrill):
    def __init__(self, mode: Mode, scenario: Scenario, messages: int, batch_size: int,
                 root: Path, progress: Progress | None, transport: str,
                 hooks: Sequence[GatewayHooks] = ()) -> None:
        super().__init__(mode, scenario, messages, batch_size, root, progress, transport, hooks)
        self.entity = TOPIC
        self.by_subscription: dict[str, Counter[str]] = {s: Counter() for s in SUBSCRIPTIONS}
        self.receivers: dict[str, AsyncGeoReceiver] = {}

    def _declare(self, namespace: LocalNamespace) -> None:
        namespace.create_topic(TOPIC)
        for name in SUBSCRIPTIONS:
            namespace.create_subscription(TOPIC, name, lock_duration=_LOCK,
                                          max_delivery_count=_MAX_DELIVERIES)

    def _receivers(self, primary: NamespaceLike, secondary: NamespaceLike
                   ) -> list[tuple[AsyncGeoReceiver | AsyncGeoPartitionReceiver, Handler]]:
        self.receivers = {name: AsyncGeoReceiver(
            primary=primary, secondary=secondary, entity=f"{TOPIC}/Subscriptions/{name}",
            dedup_store=self.root / "dedup.db", data_dir=self.root / "namespaces",
            hooks=[DuplicateRecorder(self.timeline), *self.hooks])
            for name in SUBSCRIPTIONS}
        return [(receiver, self._handler(name)) for name, receiver in self.receivers.items()]

    def _handler(self, name: str) -> Handler:
        counts = self.by_subscription[name]

        async def handle(message: ReceivedMessage) -> None:
            counts[message.message_id] += 1
            self.delivered[message.message_id] += 1
            self.timeline.add_delivered(message.namespace)
            done = min(len(c) for c in self.by_subscription.values())
            if len(counts) == done and (done % 500 == 0 or done == self.total):
                self.progress("delivered", done, self.total)
        return handle

    def _all_delivered(self) -> bool:
        return all(counts[i] for counts in self.by_subscription.values() for i in self.sent_ids)

    def _report(self, suppressed: int, replay_seconds: float | None,
                elapsed: float) -> DrillReport:
        base = super()._report(suppressed, replay_seconds, elapsed)
        unique = set(self.sent_ids)
        per: dict[str, dict[str, int]] = {}
        for name, counts in self.by_subscription.items():
            per[name] = {
                "delivered": sum(1 for i in unique if counts[i]),
                "lost": sum(1 for i in unique if not counts[i]),
                "duplicates_delivered": sum(c - 1 for c in counts.values() if c > 1),
                "duplicates_suppressed": (self.receivers[name].stats.duplicates_suppressed
                                          if name in self.receivers else 0),
            }
        return dataclasses.replace(
            base, entity="topic", subscriptions=per,
            # Delivered: to every subscription; lost and duplicates: added up over them.
            delivered=sum(1 for i in unique if all(c[i] for c in self.by_subscription.values())),
            lost=sum(p["lost"] for p in per.values()),
            duplicates_delivered=sum(p["duplicates_delivered"] for p in per.values()))
