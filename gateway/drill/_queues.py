"""The queue drills: a sender and a de-duplicating receiver while namespaces fail.

``primary-outage``, ``both-down``, ``flapping``, ``lost-replies`` and ``hang`` (see
:func:`gateway.drill.run_drill`). Each scenario is a script of faults injected by the
fraction of the messages sent, through the namespaces' control files (the ones
``geogateway namespace down`` writes), so that the same script drives the embedded
namespaces and the SDK transports on ``geogateway emulator``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from gateway.drill._common import PRIMARY, SECONDARY, Progress, Scenario
from gateway.drill._report import DrillCounters, DrillReport
from gateway.drill._timeline import DrillTimeline, DuplicateRecorder
from gateway.emulator import EmulatorProcess
from gateway.geo import (
    AsyncGeoPartitionReceiver,
    AsyncGeoReceiver,
    AsyncGeoSender,
    GatewayHooks,
    NamespaceConfig,
    NamespaceLike,
    SendResult,
)
from gateway.transports.base import PartitionEvent, ReceivedMessage
from gateway.transports.local import LocalNamespace
from replication import Message, Mode

__all__ = ["BatchSender", "Handler", "QueueDrill", "run_queue_drill"]

#: What a drill's receiver calls with each message it delivers.
Handler = Callable[[Any], Awaitable[None]]

ENTITY = "drill"
HUB, HUB_PARTITIONS = "drill-events", 4
_LOCK, _MAX_DELIVERIES = 5.0, 100
# Seconds within which `geogateway emulator` applies `namespace down/up/faults`: twice
# its control-file poll interval.
_EMULATOR_APPLIES = 0.25
_QUEUE = {"lock_duration": _LOCK, "max_delivery_count": _MAX_DELIVERIES}

# (fraction of messages sent, action, namespace) for each scenario.
_SCRIPTS: dict[Scenario, list[tuple[float, str, str]]] = {
    Scenario.PRIMARY_OUTAGE: [(0.3, "down", PRIMARY), (0.6, "up", PRIMARY)],
    Scenario.BOTH_DOWN: [
        (0.3, "down", PRIMARY), (0.35, "down", SECONDARY),
        (0.6, "up", PRIMARY), (0.6, "up", SECONDARY),
    ],
    Scenario.FLAPPING: [
        (0.2, "down", PRIMARY), (0.3, "up", PRIMARY), (0.4, "down", PRIMARY),
        (0.5, "up", PRIMARY), (0.6, "down", PRIMARY), (0.7, "up", PRIMARY),
    ],
    Scenario.LOST_REPLIES: [(0.3, "lose", PRIMARY), (0.6, "heal", PRIMARY)],
    Scenario.HANG: [(0.3, "hang", PRIMARY), (0.6, "unhang", PRIMARY)],
    Scenario.SESSIONS: [(0.3, "down", PRIMARY), (0.6, "up", PRIMARY)],
}


class BatchSender(Protocol):
    """What the drill's send loop needs of a sender (a geo sender, or a client of a proxy)."""

    @property
    def backlog(self) -> frozenset[str]: ...

    async def send_batch(self, messages: Sequence[Message]) -> SendResult: ...


async def run_queue_drill(
    *, mode: Mode, scenario: Scenario, messages: int, batch_size: int, root: Path,
    settle_timeout: float, progress: Progress | None, transport: str = "local",
    hooks: Sequence[GatewayHooks] = (),
) -> DrillReport:
    """Run one queue drill in ``root``; see :func:`gateway.drill.run_drill`.

    With ``transport="servicebus"`` or ``"eventhubs"`` the namespaces are served by
    ``geogateway emulator`` (a child process started and stopped here).
    """
    drill = QueueDrill(mode, scenario, messages, batch_size, root, progress, transport, hooks)
    return await drill.run(settle_timeout)


class QueueDrill:
    """One queue drill (and, through its subclass in ``_topics``, a topic drill)."""

    def __init__(
        self, mode: Mode, scenario: Scenario, messages: int, batch_size: int, root: Path,
        progress: Progress | None, transport: str = "local",
        hooks: Sequence[GatewayHooks] = (),
    ) -> None:
        self.mode, self.scenario, self.total, self.batch_size = mode, scenario, messages, batch_size
        self.root, self.transport = root, transport
        self.hooks = list(hooks)
        self.entity = HUB if transport == "eventhubs" else ENTITY
        self.progress = progress or (lambda phase, done, total: None)
        self.namespaces = {
            ns: LocalNamespace(ns, data_dir=root / "namespaces") for ns in (PRIMARY, SECONDARY)
        }
        for namespace in self.namespaces.values():
            namespace.up()
            namespace.set_faults(latency=0.0, lost_replies=0.0)
            self._declare(namespace)
        #: What happened when, for the drill's picture.
        self.timeline = DrillTimeline()
        self.counters = DrillCounters(self.timeline)
        self.delivered: Counter[str] = Counter()
        self.sent_ids: list[str] = []
        self.failover_seconds: list[float] = []
        #: How long each send started while a namespace hung took (the hang scenario).
        self.hung_send_seconds: list[float] = []
        self._hung: set[str] = set()
        # The fault whose failover is not timed yet: (namespace, since when), since
        # None for lost replies (then the send that moves away is timed by itself).
        self._fault: tuple[str, float | None] | None = None
        self._down: set[str] = set()
        self._up_at: float | None = None

    def _declare(self, namespace: LocalNamespace) -> None:
        """Create the drill's entity in one namespace."""
        if self.transport == "eventhubs":
            namespace.create_partitioned(HUB, partitions=HUB_PARTITIONS)
        else:
            namespace.create_queue(ENTITY, lock_duration=_LOCK,
                                   max_delivery_count=_MAX_DELIVERIES)

    def _emulated(self) -> dict[str, Any]:
        """The entities the emulator declares (its ``queues`` and ``event_hubs``)."""
        if self.transport == "eventhubs":
            return {"queues": {}, "event_hubs": {HUB: HUB_PARTITIONS}}
        return {"queues": {ENTITY: _QUEUE}, "event_hubs": None}

    def _message(self, i: int) -> Message:
        return Message(f"drill message {i}".encode(), message_id=f"drill-{i:08d}")

    async def run(self, settle_timeout: float) -> DrillReport:
        started = self.timeline.started = time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            if self.transport in ("local", "proxy"):
                primary: NamespaceLike = f"local://{PRIMARY}"
                secondary: NamespaceLike = f"local://{SECONDARY}"
            else:
                emulator = await stack.enter_async_context(EmulatorProcess(
                    (PRIMARY, SECONDARY), data_dir=self.root / "namespaces",
                    log=self.root / "emulator.log", **self._emulated()))
                primary, secondary = (
                    NamespaceConfig(connection_string=emulator.connection_string(ns), name=ns,
                                    kind=self.transport)
                    for ns in (PRIMARY, SECONDARY))
            suppressed, replay_seconds = await self._run(primary, secondary, settle_timeout)
        self.timeline.finish()
        return self._report(suppressed, replay_seconds, time.monotonic() - started)

    def _report(self, suppressed: int, replay_seconds: float | None,
                elapsed: float) -> DrillReport:
        unique = set(self.sent_ids)
        return DrillReport(
            scenario=self.scenario.value, mode=self.mode.value, messages=self.total,
            sent=len(self.sent_ids), delivered=sum(1 for i in unique if self.delivered[i]),
            lost=sum(1 for i in unique if not self.delivered[i]),
            duplicates_delivered=sum(c - 1 for c in self.delivered.values() if c > 1),
            duplicates_suppressed=suppressed, buffered=self.counters.buffered,
            replayed=self.counters.replayed, role_swaps=self.counters.role_swaps,
            failover_seconds=self.failover_seconds, replay_seconds=replay_seconds,
            hung_send_seconds=self.hung_send_seconds,
            elapsed_seconds=round(elapsed, 3), transport=self.transport,
            timeline=self.timeline,
        )

    async def _run(self, primary: NamespaceLike, secondary: NamespaceLike,
                   settle_timeout: float) -> tuple[int, float | None]:
        """Send, settle and receive; return (duplicates suppressed, replay seconds)."""
        sender = AsyncGeoSender(
            primary=primary, secondary=secondary, entity=self.entity,
            mode=self.mode, durable_queue=self.root / "buffer.db",
            hooks=[self.counters, *self.hooks],
            data_dir=self.root / "namespaces", state_dir=self.root / "state",
        )
        receivers = self._receivers(primary, secondary)
        stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(sender)
            for receiver, _ in receivers:
                await stack.enter_async_context(receiver)
            receiving = [asyncio.create_task(
                receiver.run(handle, stop=stop) if isinstance(receiver, AsyncGeoPartitionReceiver)
                else receiver.run(handle, max_messages=100, stop=stop))
                for receiver, handle in receivers]
            try:
                replay_seconds = await self._send_and_settle(sender, settle_timeout)
            finally:
                stop.set()
                await asyncio.gather(*receiving)
        return sum(self._suppressed(receiver) for receiver, _ in receivers), replay_seconds

    def _receivers(self, primary: NamespaceLike, secondary: NamespaceLike
                   ) -> list[tuple[AsyncGeoReceiver | AsyncGeoPartitionReceiver, Handler]]:
        """The drill's receivers, each with its handler."""
        if self.transport == "eventhubs":
            return [(AsyncGeoPartitionReceiver(
                primary=primary, secondary=secondary, entity=self.entity,
                checkpoint_store=self.root / "checkpoints.db",
                dedup_store=self.root / "dedup.db", data_dir=self.root / "namespaces",
                hooks=[DuplicateRecorder(self.timeline), *self.hooks]),
                self._handle)]
        return [(AsyncGeoReceiver(
            primary=primary, secondary=secondary, entity=self.entity,
            dedup_store=self.root / "dedup.db", data_dir=self.root / "namespaces",
            hooks=[DuplicateRecorder(self.timeline), *self.hooks]),
            self._handle)]

    @staticmethod
    def _suppressed(receiver: AsyncGeoReceiver | AsyncGeoPartitionReceiver) -> int:
        if isinstance(receiver, AsyncGeoPartitionReceiver):
            return receiver.dedup_stats.duplicates
        return receiver.stats.duplicates_suppressed

    def _all_delivered(self) -> bool:
        return all(self.delivered[i] for i in self.sent_ids)

    async def _handle(self, message: ReceivedMessage | PartitionEvent) -> None:
        self.delivered[message.message.message_id] += 1
        self.timeline.add_delivered(message.namespace)
        delivered = len(self.delivered)
        if delivered % 500 == 0 or delivered == self.total:
            self.progress("delivered", delivered, self.total)

    async def _send_and_settle(self, sender: BatchSender, settle_timeout: float) -> float | None:
        """Send every message, wait until the backlog is replayed and all is delivered
        (the replay's seconds), then a little longer: a late duplicate is caught too."""
        await self._send_all(sender)
        replay_seconds = await self._settle(sender, settle_timeout)
        await asyncio.sleep(0.5)
        return replay_seconds

    async def _send_all(self, sender: BatchSender) -> None:
        script = list(_SCRIPTS[self.scenario])
        sent = 0
        while sent < self.total:
            injected = False
            while script and sent >= script[0][0] * self.total:
                _, action, ns = script.pop(0)
                self._inject(action, ns)
                injected = True
            if injected and self.transport not in ("local", "proxy"):
                await self._until_applied()
            batch = [self._message(i)
                     for i in range(sent, min(sent + self.batch_size, self.total))]
            started, hung = time.monotonic(), bool(self._hung)
            result = await sender.send_batch(batch)
            if hung:
                self.hung_send_seconds.append(round(time.monotonic() - started, 4))
            self.timeline.add_sent(result.namespaces, len(batch))
            self._note_failover(result.namespaces, started)
            self.sent_ids.extend(m.message_id for m in batch)
            sent += len(batch)
            if sent % 500 < self.batch_size or sent == self.total:
                self.progress("sent", sent, self.total)
        for _, action, ns in script:
            self._inject(action, ns)

    async def _until_applied(self) -> None:
        # The emulator applies a change of the namespaces' control files within its
        # poll interval; wait that out, so that the change is in effect for the next
        # send however few messages the drill has, and time a failover from then.
        await asyncio.sleep(_EMULATOR_APPLIES)
        if self._fault is not None and self._fault[1] is not None:
            self._fault = (self._fault[0], time.monotonic())

    def _inject(self, action: str, ns: str) -> None:
        namespace = self.namespaces[ns]
        self.timeline.add_fault(action, ns)
        if action == "down":
            namespace.down()
            self._down.add(ns)
            # A failover clock starts only while the other namespace is up to take over.
            if self._fault is None and len(self._down) < len(self.namespaces):
                self._fault = (ns, time.monotonic())
            elif len(self._down) == len(self.namespaces):
                self._fault = None
        elif action == "up":
            namespace.up()
            self._down.discard(ns)
            self._up_at = time.monotonic()
        elif action == "hang":
            namespace.hang()
            self._hung.add(ns)
            if self._fault is None:
                self._fault = (ns, time.monotonic())
        elif action == "unhang":
            namespace.unhang()
            self._hung.discard(ns)
            self._up_at = time.monotonic()
        elif action == "lose":
            namespace.set_faults(lost_replies=0.3)
            if self._fault is None:
                self._fault = (ns, None)
        elif action == "heal":
            namespace.set_faults(lost_replies=0.0)
            if self._fault == (ns, None):
                self._fault = None  # no reply was lost on the way: nothing moved

    def _note_failover(self, accepted: tuple[str, ...], started: float) -> None:
        # One failover per fault: the first send started after it that the faulty
        # namespace did not accept and the other did. Timed from the outage, or for
        # lost replies from the start of that send; see the module docstring.
        if self._fault is None:
            return
        faulty, since = self._fault
        if (since is not None and started < since) or not accepted or faulty in accepted:
            return
        seconds = round(time.monotonic() - (started if since is None else since), 4)
        self.failover_seconds.append(seconds)
        self.timeline.add_failover(seconds)
        self._fault = None

    async def _settle(self, sender: BatchSender, timeout: float) -> float | None:
        for namespace in self.namespaces.values():
            namespace.up()  # also ends a hang
            namespace.set_faults(latency=0.0, lost_replies=0.0)
        self._hung.clear()
        deadline = time.monotonic() + timeout
        drained = False
        delivered_at: float | None = None
        self.progress("replaying", 0, 1)
        while time.monotonic() < deadline:
            if not drained and not sender.backlog:
                drained = True
                self.progress("replaying", 1, 1)
            if drained and self._all_delivered():
                # The last replay's hook comes just after its messages were acked, and
                # they may be delivered before it: wait a moment for it (the replay time).
                delivered_at = delivered_at or time.monotonic()
                if (self.counters.replayed >= self.counters.buffered
                        or time.monotonic() - delivered_at > 1.0):
                    break
            await asyncio.sleep(0.05)
        # Replay time: from the namespaces' return to the last buffered message sent.
        if not self.counters.buffered or self.counters.last_replay_at is None:
            return None
        since = self._up_at if self._up_at is not None else deadline - timeout
        return round(max(0.0, self.counters.last_replay_at - since), 3)
