"""The sessions drill: many sessions' messages interleaved on a session-enabled queue,
the primary taken down at 30% of the messages and brought back at 60%.

Message ``i`` belongs to session ``s{i % S}`` and is that session's message ``i // S``
in the sender's order. The receivers (two geo session receivers sharing a dedup store
and a state directory, as two processes of one machine would) start when the primary
goes down: everything sent before the outage is still in the primary, so in passive
mode every session's first part is out of reach while its later part arrives in the
secondary. They must wait for the primary's part (the gap timeout is the drill's
settle timeout) and hand each session over in the sender's order. The report counts,
per session, what was lost, delivered twice, and delivered *out of order* (after a
later message of its session); the drill passes only when all three are 0.

``receiver="plain"`` runs the same drill with a plain ``AsyncGeoReceiver`` on a queue
without sessions, which de-duplicates but does not reorder: in passive mode it hands
the secondary's part over first (tests use it to show the order check can fail).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

from gateway.drill._common import Progress, Scenario
from gateway.drill._queues import QueueDrill
from gateway.drill._report import DrillReport
from gateway.drill._timeline import DuplicateRecorder
from gateway.geo import (
    AsyncGeoReceiver,
    AsyncGeoSender,
    AsyncGeoSessionReceiver,
    GatewayHooks,
    NamespaceLike,
)
from gateway.transports.base import ReceivedMessage
from gateway.transports.local import LocalNamespace
from replication import ConfigError, Message, Mode

__all__ = ["RECEIVERS", "SessionsDrill", "run_sessions_drill"]

ENTITY = "drill-sessions"
_LOCK, _MAX_DELIVERIES = 5.0, 100
RECEIVERS = ("session", "plain")


async def run_sessions_drill(*, mode: Mode, messages: int, batch_size: int, root: Path,
                             settle_timeout: float, progress: Progress | None,
                             transport: str = "local", sessions: int = 8,
                             receivers: int = 2, receiver: str = "session",
                             drill: type[SessionsDrill] | None = None) -> DrillReport:
    """Run the sessions drill in ``root``; see the module docstring. ``drill``: the
    drill's class (the proxy's runs its clients through a proxy).

    Raises:
        ConfigError: an Event Hubs transport (sessions are Service Bus's), a bad
            ``receiver`` or too few sessions or receivers.
    """
    if transport == "eventhubs":
        raise ConfigError("the sessions scenario needs Service Bus sessions: use --transport "
                          "local or servicebus")
    if receiver not in RECEIVERS or sessions < 1 or receivers < 1:
        raise ConfigError(f"receiver must be one of {RECEIVERS}; sessions and receivers >= 1")
    made = (drill or SessionsDrill)(mode, messages, batch_size, root, progress, transport,
                                     sessions=sessions, receivers=receivers,
                                     plain=receiver == "plain")
    return await made.run(settle_timeout)


class _Gaps(GatewayHooks):
    def __init__(self) -> None:
        self.gaps = 0

    def on_session_gap(self, **kw: Any) -> None:
        self.gaps += 1


class SessionsDrill(QueueDrill):
    """The sessions drill with its geo sender and session receivers in this process."""

    def __init__(self, mode: Mode, messages: int, batch_size: int, root: Path,
                 progress: Progress | None, transport: str, *, sessions: int, receivers: int,
                 plain: bool) -> None:
        self.sessions, self.receivers, self.plain = sessions, receivers, plain
        super().__init__(mode, Scenario.SESSIONS, messages, batch_size, root, progress,
                         transport)
        self.entity = ENTITY
        self.highest: dict[str, int] = {}
        self.out_of_order: Counter[str] = Counter()
        self.gap_hook = _Gaps()
        self._outage = asyncio.Event()

    def _settings(self) -> dict[str, Any]:
        return {"lock_duration": _LOCK, "max_delivery_count": _MAX_DELIVERIES,
                "requires_session": not self.plain}

    def _declare(self, namespace: LocalNamespace) -> None:
        namespace.create_queue(ENTITY, **self._settings())

    def _emulated(self) -> dict[str, Any]:
        return {"queues": {ENTITY: self._settings()}, "event_hubs": None}

    def _message(self, i: int) -> Message:
        return Message(f"drill message {i}".encode(), message_id=f"drill-{i:08d}",
                       session_id=f"s{i % self.sessions:03d}")

    def _inject(self, action: str, ns: str) -> None:
        super()._inject(action, ns)
        if action == "down":
            self._outage.set()

    async def _run(self, primary: NamespaceLike, secondary: NamespaceLike,
                   settle_timeout: float) -> tuple[int, float | None]:
        sender = AsyncGeoSender(
            primary=primary, secondary=secondary, entity=ENTITY, mode=self.mode,
            durable_queue=self.root / "buffer.db", hooks=[self.counters, *self.hooks],
            data_dir=self.root / "namespaces", state_dir=self.root / "state")
        common: dict[str, Any] = {
            "primary": primary, "secondary": secondary, "entity": ENTITY,
            "dedup_store": self.root / "dedup.db", "data_dir": self.root / "namespaces"}
        made: list[AsyncGeoSessionReceiver | AsyncGeoReceiver]
        if self.plain:
            made = [AsyncGeoReceiver(**common, poll_wait=0.1,
                                     hooks=[DuplicateRecorder(self.timeline), *self.hooks])]
        else:
            made = [AsyncGeoSessionReceiver(
                **common, state_dir=self.root / "state",
                hooks=[self.gap_hook, DuplicateRecorder(self.timeline), *self.hooks], poll_wait=0.1,
                gap_timeout=settle_timeout) for _ in range(self.receivers)]
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        try:
            async with sender:
                tasks.append(asyncio.create_task(self._run_receivers(made, stop)))
                await self._send_all(sender)
                replay_seconds = await self._settle(sender, settle_timeout)
                await asyncio.sleep(0.5)  # a late duplicate would be caught and counted
        finally:
            self._outage.set()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for r in made:
                await r.aclose()
        suppressed = sum(r.stats.duplicates_suppressed for r in made)
        return suppressed, replay_seconds

    async def _run_receivers(self, made: list[Any], stop: asyncio.Event) -> None:
        # The receivers start with the outage: what was sent before is all in the primary.
        await self._outage.wait()
        runs = [r.run(self._handle, stop=stop) if self.plain else
                r.run(self._handle, stop=stop, session_idle_timeout=0.5) for r in made]
        await asyncio.gather(*runs)

    async def _handle(self, message: ReceivedMessage) -> None:  # type: ignore[override]
        await super()._handle(message)
        i = int(message.message_id.rsplit("-", 1)[1])
        session, n = f"s{i % self.sessions:03d}", i // self.sessions
        if n < self.highest.get(session, -1):
            self.out_of_order[session] += 1
        self.highest[session] = max(n, self.highest.get(session, -1))

    def _report(self, suppressed: int, replay_seconds: float | None,
                elapsed: float) -> DrillReport:
        report = super()._report(suppressed, replay_seconds, elapsed)
        per: dict[str, dict[str, int]] = {}
        for i in range(len(self.sent_ids)):
            row = per.setdefault(f"s{i % self.sessions:03d}", dict.fromkeys(
                ("sent", "delivered", "lost", "duplicates_delivered", "out_of_order"), 0))
            count = self.delivered[self.sent_ids[i]]
            row["sent"] += 1
            row["delivered"] += count > 0
            row["lost"] += count == 0
            row["duplicates_delivered"] += max(0, count - 1)
        for session, n in self.out_of_order.items():
            per[session]["out_of_order"] = n
        return dataclasses.replace(report, out_of_order=sum(self.out_of_order.values()),
                                   per_session=per, session_gaps=self.gap_hook.gaps)
