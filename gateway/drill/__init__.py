"""Failover drills: send and receive through the gateway while namespaces fail.

A drill runs a sender and a de-duplicating receiver on two embedded namespaces,
injects a scenario while messages flow (through the same control files that
``geogateway namespace down`` writes), lets the durable queue replay, and reports
what arrived. It passes only when nothing was lost and no duplicate was delivered.

With ``transport="servicebus"`` or ``"eventhubs"`` the same namespaces are served by
``geogateway emulator`` (a child process the drill starts and stops) and the gateway
talks to them through the Azure SDK transports: Service Bus queues, or an event hub
read by a partition-balanced geo receiver. Outages are injected the same way.

The ``consumer-*`` scenarios instead run several receiver processes on a
partitioned entity and crash, add or remove them mid-run; see
:mod:`gateway.drill._consumers`.

Each run keeps its namespaces, queue, dedup and checkpoint files in a state folder of
its own, new for every run (``DATA_DIR/drill-TIME-XXXX``, or under the system's
temporary directory), so a drill run twice in one data dir starts from nothing both
times. The folder is removed when the drill passes and kept (for its files and logs)
when it fails or raises, or with ``keep_state=True``. Child processes (the emulator,
the workers) stop by themselves if the drill's process is killed
(:mod:`gateway._support.parent_watch`).

The report and what its fields mean: :mod:`gateway.drill._report`. The relay drills
(requests through a geo-redundant Azure Relay hybrid connection) are
:func:`run_relay_drill`, in :mod:`gateway.drill._relay`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from gateway.drill._relay import RelayDrillReport, RelayScenario, run_relay_drill
from gateway.drill._report import DrillCounters, DrillReport
from gateway.emulator import EmulatorProcess
from gateway.geo import (
    AsyncGeoPartitionReceiver,
    AsyncGeoReceiver,
    AsyncGeoSender,
    NamespaceConfig,
    NamespaceLike,
)
from gateway.transports.base import PartitionEvent, ReceivedMessage
from gateway.transports.local import LocalNamespace
from replication import ConfigError, Message, Mode

__all__ = ["TRANSPORTS", "DrillReport", "RelayDrillReport", "RelayScenario", "Scenario",
           "run_drill", "run_relay_drill"]

logger = logging.getLogger("geogateway.drill")

ENTITY = "drill"
HUB, HUB_PARTITIONS = "drill-events", 4
PRIMARY, SECONDARY = "primary", "secondary"
TRANSPORTS = ("local", "servicebus", "eventhubs")
_LOCK, _MAX_DELIVERIES = 5.0, 100
# Seconds within which `geogateway emulator` applies `namespace down/up/faults`: twice
# its control-file poll interval.
_EMULATOR_APPLIES = 0.25
_QUEUE = {"lock_duration": _LOCK, "max_delivery_count": _MAX_DELIVERIES}


class Scenario(enum.Enum):
    """What goes wrong during a drill."""

    PRIMARY_OUTAGE = "primary-outage"  # primary down at 30% of the messages, up at 60%
    BOTH_DOWN = "both-down"  # primary down at 30%, secondary at 35%, both up at 60%
    FLAPPING = "flapping"  # primary down and up every 10% from 20% to 80%
    LOST_REPLIES = "lost-replies"  # 30% of primary's sends land but time out, 30% to 60%
    # Receiver processes on a partitioned entity (gateway.drill._consumers):
    CONSUMER_CRASH = "consumer-crash"  # 3 workers; one SIGKILLed at 40% delivered
    CONSUMER_SCALE = "consumer-scale"  # 2 workers; a 3rd joins at 30%, one leaves at 60%

    @classmethod
    def parse(cls, value: Scenario | str) -> Scenario:
        try:
            return cls(value)
        except ValueError:
            if value in {s.value for s in RelayScenario}:
                raise ConfigError(f"{value} is a relay drill: run it with "
                                  "run_relay_drill()") from None
            known = ", ".join(s.value for s in cls)
            raise ConfigError(f"unknown scenario {value!r}: use one of {known}") from None


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
}


Progress = Callable[[str, int, int], None]


async def run_drill(
    *,
    mode: Mode | str | None = None,
    scenario: Scenario | str = Scenario.PRIMARY_OUTAGE,
    messages: int = 10_000,
    batch_size: int = 1,
    data_dir: str | Path | None = None,
    settle_timeout: float = 60.0,
    progress: Progress | None = None,
    transport: str = "local",
    keep_state: bool = False,
    on_state_dir: Callable[[Path], None] | None = None,
) -> DrillReport:
    """Run one drill and return its report.

    Args:
        mode: passive or active replication of the sender (default: active for the
            ``consumer-*`` scenarios, passive for the others).
        scenario: what fails while messages flow.
        messages: how many messages to send.
        batch_size: messages per ``send_batch`` call.
        data_dir: where the run's state folder is made (a new one each run, holding
            its namespaces, queue and dedup store); the system's temporary directory
            when not given. The folder is removed when the drill passes.
        settle_timeout: how long to wait for replay and delivery after the last send.
        progress: called as ``progress(phase, done, total)``.
        transport: ``"local"`` (the embedded namespaces), or ``"servicebus"`` /
            ``"eventhubs"`` (the Azure SDK transports, against the emulator).
        keep_state: keep the state folder even when the drill passes.
        on_state_dir: called with the state folder once it exists, before anything
            runs (e.g. to print it).

    Raises:
        ConfigError: an unknown transport, or a consumer scenario on Service Bus (it has
            no partitioned entities).
    """
    scenario = Scenario.parse(scenario)
    consumers = scenario in (Scenario.CONSUMER_CRASH, Scenario.CONSUMER_SCALE)
    if transport not in TRANSPORTS:
        raise ConfigError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    if consumers and transport == "servicebus":
        raise ConfigError(f"the {scenario.value} scenario reads a partitioned entity: use "
                          "--transport local or eventhubs")
    if mode is None:
        mode = Mode.ACTIVE if consumers else Mode.PASSIVE
    mode = Mode.parse(mode)
    if messages < 1 or batch_size < 1:
        raise ValueError("messages and batch_size must be >= 1")
    root = _new_state_dir(data_dir)
    if on_state_dir is not None:
        on_state_dir(root)
    if consumers:
        from gateway.drill._consumers import run_consumer_drill  # imports this module

        report = await run_consumer_drill(
            mode=mode, scenario=scenario, messages=messages, batch_size=batch_size,
            root=root, settle_timeout=settle_timeout,
            progress=progress or (lambda phase, done, total: None), transport=transport,
        )
    else:
        report = await _Drill(mode, scenario, messages, batch_size, root, progress,
                              transport).run(settle_timeout)
    # An error above leaves the folder for a look at its files and logs.
    if report.passed and not keep_state and _remove(root):
        return report
    return dataclasses.replace(report, state_dir=str(root))


def _new_state_dir(data_dir: str | Path | None) -> Path:
    """A new, empty folder (0700) for one run, in ``data_dir`` or the temp directory."""
    parent = Path(data_dir) if data_dir is not None else Path(tempfile.gettempdir())
    try:
        parent.mkdir(parents=True, exist_ok=True)
        prefix = f"{'drill' if data_dir is not None else 'geogateway-drill'}-" \
                 f"{time.strftime('%Y%m%d-%H%M%S')}-"
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise ConfigError(f"cannot create the drill's state folder in {parent}: "
                          f"{exc.strerror or exc}; choose another --data-dir") from None


def _remove(root: Path) -> bool:
    try:
        shutil.rmtree(root)
    except OSError as exc:
        logger.warning("could not remove the drill's state folder %s: %s", root, exc)
        return False
    return True


class _Drill:
    def __init__(
        self, mode: Mode, scenario: Scenario, messages: int, batch_size: int, root: Path,
        progress: Progress | None, transport: str = "local",
    ) -> None:
        self.mode, self.scenario, self.total, self.batch_size = mode, scenario, messages, batch_size
        self.root, self.transport = root, transport
        self.entity = HUB if transport == "eventhubs" else ENTITY
        self.progress = progress or (lambda phase, done, total: None)
        self.namespaces = {
            ns: LocalNamespace(ns, data_dir=root / "namespaces") for ns in (PRIMARY, SECONDARY)
        }
        for namespace in self.namespaces.values():
            namespace.up()
            namespace.set_faults(latency=0.0, lost_replies=0.0)
            if transport == "eventhubs":
                namespace.create_partitioned(HUB, partitions=HUB_PARTITIONS)
            else:
                namespace.create_queue(ENTITY, lock_duration=_LOCK,
                                       max_delivery_count=_MAX_DELIVERIES)
        self.counters = DrillCounters()
        self.delivered: Counter[str] = Counter()
        self.sent_ids: list[str] = []
        self.failover_seconds: list[float] = []
        # The fault whose failover is not timed yet: (namespace, since when), since
        # None for lost replies (then the send that moves away is timed by itself).
        self._fault: tuple[str, float | None] | None = None
        self._down: set[str] = set()
        self._up_at: float | None = None

    async def run(self, settle_timeout: float) -> DrillReport:
        started = time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            if self.transport == "local":
                primary: NamespaceLike = f"local://{PRIMARY}"
                secondary: NamespaceLike = f"local://{SECONDARY}"
            else:
                emulator = await stack.enter_async_context(EmulatorProcess(
                    (PRIMARY, SECONDARY), data_dir=self.root / "namespaces",
                    queues={} if self.transport == "eventhubs" else {ENTITY: _QUEUE},
                    event_hubs={HUB: HUB_PARTITIONS} if self.transport == "eventhubs" else None,
                    log=self.root / "emulator.log"))
                primary, secondary = (
                    NamespaceConfig(connection_string=emulator.connection_string(ns), name=ns,
                                    kind=self.transport)
                    for ns in (PRIMARY, SECONDARY))
            suppressed, replay_seconds = await self._run(primary, secondary, settle_timeout)
        unique = set(self.sent_ids)
        return DrillReport(
            scenario=self.scenario.value, mode=self.mode.value, messages=self.total,
            sent=len(self.sent_ids), delivered=sum(1 for i in unique if self.delivered[i]),
            lost=sum(1 for i in unique if not self.delivered[i]),
            duplicates_delivered=sum(c - 1 for c in self.delivered.values() if c > 1),
            duplicates_suppressed=suppressed, buffered=self.counters.buffered,
            replayed=self.counters.replayed, role_swaps=self.counters.role_swaps,
            failover_seconds=self.failover_seconds, replay_seconds=replay_seconds,
            elapsed_seconds=round(time.monotonic() - started, 3), transport=self.transport,
        )

    async def _run(self, primary: NamespaceLike, secondary: NamespaceLike,
                   settle_timeout: float) -> tuple[int, float | None]:
        """Send, settle and receive; return (duplicates suppressed, replay seconds)."""
        sender = AsyncGeoSender(
            primary=primary, secondary=secondary, entity=self.entity,
            mode=self.mode, durable_queue=self.root / "buffer.db", hooks=self.counters,
            data_dir=self.root / "namespaces", state_dir=self.root / "state",
        )
        receiver: AsyncGeoReceiver | AsyncGeoPartitionReceiver
        if self.transport == "eventhubs":
            receiver = AsyncGeoPartitionReceiver(
                primary=primary, secondary=secondary, entity=self.entity,
                checkpoint_store=self.root / "checkpoints.db",
                dedup_store=self.root / "dedup.db", data_dir=self.root / "namespaces",
            )
        else:
            receiver = AsyncGeoReceiver(
                primary=primary, secondary=secondary, entity=self.entity,
                dedup_store=self.root / "dedup.db", data_dir=self.root / "namespaces",
            )
        stop = asyncio.Event()
        async with sender, receiver:
            if isinstance(receiver, AsyncGeoPartitionReceiver):
                receiving = asyncio.create_task(receiver.run(self._handle, stop=stop))
            else:
                receiving = asyncio.create_task(
                    receiver.run(self._handle, max_messages=100, stop=stop))
            try:
                await self._send_all(sender)
                replay_seconds = await self._settle(sender, settle_timeout)
                # A little longer, so that a late duplicate would be caught and counted.
                await asyncio.sleep(0.5)
            finally:
                stop.set()
                await receiving
            suppressed = (receiver.dedup_stats.duplicates
                          if isinstance(receiver, AsyncGeoPartitionReceiver)
                          else receiver.stats.duplicates_suppressed)
        return suppressed, replay_seconds

    async def _handle(self, message: ReceivedMessage | PartitionEvent) -> None:
        self.delivered[message.message.message_id] += 1
        delivered = len(self.delivered)
        if delivered % 500 == 0 or delivered == self.total:
            self.progress("delivered", delivered, self.total)

    async def _send_all(self, sender: AsyncGeoSender) -> None:
        script = list(_SCRIPTS[self.scenario])
        sent = 0
        while sent < self.total:
            injected = False
            while script and sent >= script[0][0] * self.total:
                _, action, ns = script.pop(0)
                self._inject(action, ns)
                injected = True
            if injected and self.transport != "local":
                await self._until_applied()
            batch = [
                Message(f"drill message {i}".encode(), message_id=f"drill-{i:08d}")
                for i in range(sent, min(sent + self.batch_size, self.total))
            ]
            started = time.monotonic()
            result = await sender.send_batch(batch)
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
        self.failover_seconds.append(
            round(time.monotonic() - (started if since is None else since), 4))
        self._fault = None

    async def _settle(self, sender: AsyncGeoSender, timeout: float) -> float | None:
        for namespace in self.namespaces.values():
            namespace.up()
            namespace.set_faults(latency=0.0, lost_replies=0.0)
        deadline = time.monotonic() + timeout
        drained = False
        self.progress("replaying", 0, 1)
        while time.monotonic() < deadline:
            if not drained and not sender.backlog:
                drained = True
                self.progress("replaying", 1, 1)
            if drained and all(self.delivered[i] for i in self.sent_ids):
                break
            await asyncio.sleep(0.05)
        # Replay time: from the namespaces' return to the last buffered message sent.
        if not self.counters.buffered or self.counters.last_replay_at is None:
            return None
        since = self._up_at if self._up_at is not None else deadline - timeout
        return round(max(0.0, self.counters.last_replay_at - since), 3)
