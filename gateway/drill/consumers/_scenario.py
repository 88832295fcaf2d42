"""The consumer drills: receiver processes crash, join and leave while messages flow.

``consumer-crash`` and ``consumer-scale`` (see :func:`gateway.drill.run_drill`). The
sender (``--mode``, active by default here) sends N messages, with partition keys, to
the partitioned entity ``drill-events`` (4 partitions) of both local namespaces (or,
with ``--transport eventhubs``, the event hub of that name on both namespaces of a
``geogateway emulator`` child process, through the Event Hubs transport) while
worker processes (``python -m gateway.drill.consumers._worker``) share its partitions through
one SQLite checkpoint store and one SQLite dedup store, recording every delivery with
an inbox handler (its write and the done mark commit in one transaction). Script, by
the fraction of the messages *delivered* so far (so the event lands mid-consumption):

* ``consumer-crash``: workers w1, w2, w3; SIGKILL w2 at 40%. The survivors take its
  partitions once its heartbeat expires and its in-flight ids once their lease ends.
* ``consumer-scale``: w1 and w2; start w3 at 30%; SIGTERM w1 at 60% (it checkpoints,
  releases its partitions and exits).

The drill waits until every id was delivered and (unless a worker was SIGKILLed)
the workers' progress counters show every copy consumed, delivered or suppressed
(or ``settle_timeout``), half a second more for late duplicates, then stops the
workers with SIGTERM. ``lost`` counts ids
never recorded, ``duplicates_delivered`` the sum of ``count - 1`` over the table
``drill_delivered``. ``duplicates_suppressed`` sums the counters that workers write
when they exit gracefully: a SIGKILLed worker's suppressions are not included.

The report also names what the script did to the workers (``worker_actions``), the
partitions of either namespace that changed hands after it (``partitions_moved``,
from the workers' records of when they owned and read each partition:
:mod:`gateway.drill.consumers._moves`) and how long each went unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sqlite3
import time
from pathlib import Path

from gateway.drill._common import PRIMARY, SECONDARY, Progress, Scenario
from gateway.drill._report import DrillCounters, DrillReport, WorkerAction
from gateway.drill._timeline import DrillTimeline
from gateway.drill._workers import Workers, send_while_watching
from gateway.drill.consumers import _shared as shared
from gateway.drill.consumers._moves import partition_moves
from gateway.emulator import EmulatorProcess
from gateway.geo import AsyncGeoSender, NamespaceConfig, NamespaceLike
from gateway.stores import SqliteDedupStore
from gateway.transports.local import LocalNamespace
from replication import Message, Mode

__all__ = ["CONSUMER_SCENARIOS", "run_consumer_drill"]

logger = logging.getLogger("geogateway.drill")

CONSUMER_SCENARIOS = frozenset({Scenario.CONSUMER_CRASH, Scenario.CONSUMER_SCALE})

# (fraction of messages delivered, action, worker); the workers started first.
_START: dict[Scenario, list[str]] = {
    Scenario.CONSUMER_CRASH: ["w1", "w2", "w3"],
    Scenario.CONSUMER_SCALE: ["w1", "w2"],
}
_SCRIPTS: dict[Scenario, list[tuple[float, str, str]]] = {
    Scenario.CONSUMER_CRASH: [(0.4, "kill", "w2")],
    Scenario.CONSUMER_SCALE: [(0.3, "start", "w3"), (0.6, "term", "w1")],
}
_POLL = 0.1
# A worker's graceful stop waits at most DRILL_BALANCE.handover_timeout for takers,
# then hands over what is left (each partition after its handler call): a worker
# still running this long after SIGTERM is stuck.
_STOP_TIMEOUT = 4 * shared.DRILL_BALANCE.handover_timeout


async def run_consumer_drill(
    *, mode: Mode, scenario: Scenario, messages: int, batch_size: int, root: Path,
    settle_timeout: float, progress: Progress, transport: str = "local",
) -> DrillReport:
    """Run one consumer drill in ``root``; see the module docstring.

    With ``transport="eventhubs"`` the namespaces are served by ``geogateway emulator``
    (a child process) and the sender and every worker use the Event Hubs transport;
    the workers get the connection strings in their environment.
    """
    drill = _ConsumerDrill(mode, scenario, messages, batch_size, root, progress)
    if transport == "local":
        return await drill.run(settle_timeout)
    async with EmulatorProcess(
        (PRIMARY, SECONDARY), data_dir=root / "namespaces",
        event_hubs={shared.ENTITY: shared.PARTITIONS},
        log=root / "logs" / "emulator.log",
    ) as emulator:
        drill.connection_strings = {ns: emulator.connection_string(ns)
                                    for ns in (PRIMARY, SECONDARY)}
        report = await drill.run(settle_timeout)
    return dataclasses.replace(report, transport=transport)


class _ConsumerDrill:
    def __init__(self, mode: Mode, scenario: Scenario, messages: int, batch_size: int,
                 root: Path, progress: Progress) -> None:
        self.mode, self.scenario, self.total, self.batch_size = mode, scenario, messages, batch_size
        self.root, self.progress = root, progress
        for name in (PRIMARY, SECONDARY):
            with LocalNamespace(name, data_dir=root / "namespaces") as namespace:
                namespace.up()
                namespace.set_faults(latency=0.0, lost_replies=0.0)
                namespace.create_partitioned(shared.ENTITY,
                                             partitions=shared.PARTITIONS)
        self.dedup_path = root / "dedup.db"
        SqliteDedupStore(self.dedup_path).close()  # creates the file as a dedup store
        with contextlib.closing(sqlite3.connect(self.dedup_path, timeout=30.0)) as conn:
            shared.create_delivered_table(conn)
            conn.commit()
        self.workers = Workers(root, stop_timeout=_STOP_TIMEOUT)
        #: What happened when, for the drill's picture (deliveries by worker).
        self.timeline = DrillTimeline(delivered_label="delivered by")
        self.counters = DrillCounters(self.timeline)
        self.sent = 0
        self.script = list(_SCRIPTS[scenario])
        self.connection_strings: dict[str, str] = {}  # Event Hubs on the emulator, if set

    def _namespaces(self) -> tuple[NamespaceLike, NamespaceLike]:
        if not self.connection_strings:
            return f"local://{PRIMARY}", f"local://{SECONDARY}"
        return tuple(  # type: ignore[return-value]
            NamespaceConfig(connection_string=self.connection_strings[ns], name=ns,
                            kind="eventhubs") for ns in (PRIMARY, SECONDARY))

    async def run(self, settle_timeout: float) -> DrillReport:
        started = self.timeline.started = time.monotonic()
        wall = time.time()
        try:
            await asyncio.gather(*(self._start(name) for name in _START[self.scenario]))
            primary, secondary = self._namespaces()
            sender = AsyncGeoSender(
                primary=primary, secondary=secondary,
                entity=shared.ENTITY, mode=self.mode,
                durable_queue=self.root / "buffer.db", hooks=self.counters,
                data_dir=self.root / "namespaces", state_dir=self.root / "state",
            )
            async with sender:
                await send_while_watching(
                    self._watch, lambda: self._send_all(sender),
                    lambda watching: self._settle(sender, watching, settle_timeout))
            await asyncio.sleep(0.5)  # a late duplicate would still be counted
        finally:
            await self.workers.stop_all()
        self.timeline.finish()
        rows = await asyncio.to_thread(self._rows)
        for worker, at in await asyncio.to_thread(self._deliveries):
            self.timeline.delivered.setdefault(worker, []).append(max(0.0, at - wall))
        ids = [f"drill-{i:08d}" for i in range(self.sent)]
        actions = WorkerAction.from_timeline(self.timeline)
        return DrillReport(
            scenario=self.scenario.value, mode=self.mode.value, messages=self.total,
            sent=self.sent, delivered=sum(1 for i in ids if i in rows),
            lost=sum(1 for i in ids if i not in rows),
            duplicates_delivered=sum(c - 1 for c in rows.values() if c > 1),
            duplicates_suppressed=self._suppressed(), buffered=self.counters.buffered,
            replayed=self.counters.replayed, role_swaps=self.counters.role_swaps,
            replay_seconds=self.counters.replay_seconds(),
            elapsed_seconds=round(time.monotonic() - started, 3), timeline=self.timeline,
            family="consumers", worker_actions=actions,
            partitions_moved=partition_moves(await asyncio.to_thread(self._spans), actions,
                                             wall),
        )

    # -- workers --------------------------------------------------------------------

    async def _start(self, name: str) -> None:
        env = {shared.connection_string_variable(ns): value
               for ns, value in self.connection_strings.items()}
        await self.workers.start(name, ["-m", "gateway.drill.consumers._worker", "--root",
                                        str(self.root), "--worker", name], env)

    async def _act(self, action: str, name: str) -> None:
        self.timeline.add_fault(action, name)
        if action == "start":
            await self._start(name)  # the next step waits until this worker is up
        elif action == "kill":
            self.workers.kill(name)
        elif action == "term":
            self.workers.terminate(name)

    def _spans(self) -> list[shared.ReadSpan]:
        """Every worker's spans of partition ownership, from its last progress file
        (a killed worker's is at most one progress interval old)."""
        spans = []
        for path in (self.root / "progress").glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                spans += [shared.ReadSpan(**span)
                          for span in json.loads(path.read_text())["reads"]]
        return spans

    def _suppressed(self) -> int:
        total = 0
        for name in self.workers.processes:
            path = self.root / "stats" / f"{name}.json"
            if path.exists():
                total += int(json.loads(path.read_text())["duplicates"])
        return total

    # -- sending and watching ---------------------------------------------------------

    async def _send_all(self, sender: AsyncGeoSender) -> None:
        while self.sent < self.total:
            batch = [
                Message(f"drill message {i}".encode(), message_id=f"drill-{i:08d}",
                        partition_key=f"key-{i % 64}")
                for i in range(self.sent, min(self.sent + self.batch_size, self.total))
            ]
            result = await sender.send_batch(batch)
            self.timeline.add_sent(result.namespaces, len(batch))
            self.sent += len(batch)
            if self.sent % 500 < self.batch_size or self.sent == self.total:
                self.progress("sent", self.sent, self.total)

    async def _watch(self) -> None:
        """Report deliveries and run the scenario's script as they pass its marks."""
        script = self.script
        while True:
            delivered = await asyncio.to_thread(self._count)
            self.progress("delivered", delivered, self.total)
            suppressed = await asyncio.to_thread(self._progress_counts, "duplicates")
            seen = self.timeline.duplicates
            seen.extend([self.timeline.now()] * max(0, suppressed - len(seen)))
            while script and delivered >= script[0][0] * self.total:
                _, action, name = script[0]
                await self._act(action, name)
                script.pop(0)
            await asyncio.sleep(_POLL)

    async def _settle(self, sender: AsyncGeoSender, watching: asyncio.Task[None],
                      timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.progress("replaying", 0, 1)
        drained = False
        while time.monotonic() < deadline:
            if not drained and not sender.backlog:
                drained = True
                self.progress("replaying", 1, 1)
            # Every script step ran (its mark was passed), every id arrived, and
            # every copy was consumed.
            if (drained and not self.script
                    and await asyncio.to_thread(self._count) >= self.sent
                    and await asyncio.to_thread(self._all_consumed)):
                return
            if watching.done():
                watching.result()  # the watcher failed: raise its error
            await asyncio.sleep(_POLL)

    def _all_consumed(self) -> bool:
        """True once the workers handled or suppressed every copy (one per namespace
        in active mode), by their progress files. A SIGKILLed worker's last counts
        are lost with it, so with one the drill does not wait for this."""
        if self.workers.killed:
            return True
        copies = self.sent * (2 if self.mode is Mode.ACTIVE else 1)
        consumed = self._progress_counts("delivered") + self._progress_counts("duplicates")
        return consumed >= copies

    def _progress_counts(self, counter: str) -> int:
        """A counter summed over the workers' progress files (written every 0.2 s)."""
        total = 0
        for path in (self.root / "progress").glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                total += int(json.loads(path.read_text())[counter])
        return total

    def _count(self) -> int:
        with contextlib.closing(sqlite3.connect(self.dedup_path, timeout=30.0)) as conn:
            return int(conn.execute("SELECT count(*) FROM drill_delivered").fetchone()[0])

    def _deliveries(self) -> list[tuple[str, float]]:
        """(worker, wall-clock time) of each first delivery."""
        with contextlib.closing(sqlite3.connect(self.dedup_path, timeout=30.0)) as conn:
            return [(str(w), float(at)) for w, at in
                    conn.execute("SELECT worker, at FROM drill_delivered ORDER BY at")]

    def _rows(self) -> dict[str, int]:
        with contextlib.closing(sqlite3.connect(self.dedup_path, timeout=30.0)) as conn:
            return dict(conn.execute("SELECT message_id, count FROM drill_delivered"))
