"""The outbox drill: orders committed with outbox rows while their dispatchers are killed.

``geogateway drill --scenario outbox [--store sqlite|postgres]``. In a state folder of
its own, the drill runs:

* the *application* (``python -m gateway.drill.outbox._app``, a child process):
  N orders, each one transaction that writes the order row and adds its message to
  the outbox, about one in seven rolled back on purpose after the add;
* two *dispatchers* sharing the outbox, child processes sending the two destinations'
  rows to the two local namespaces (``--mode``): ``d1`` is ``geogateway outbox run``,
  ``d2`` the same dispatcher with slow acknowledgements
  (:mod:`gateway.drill.outbox._dispatcher`: each send returns up to 50 ms after the
  namespaces took it, so a kill often falls between a send and the delete of its
  rows). At evenly spaced points of the application's progress (plus a random few ms)
  one of them, chosen at random, is SIGKILLed and started again at once;
* a *receiver* per destination (in this process, de-duplicating by MessageId in one
  SQLite window), whose handler counts each message's effects by MessageId and checks
  each destination's order.

When the application is done and every committed order arrived (or ``settle_timeout``),
the dispatchers are stopped and the report compares what arrived with the committed
orders (``drill_orders``) and the rolled-back ones (``rolled-back.txt``). With
``store="postgres"`` and no ``dsn`` the drill starts its own PostgreSQL server
(:class:`~gateway.stores.EmbeddedPostgres`) in the state folder; with a ``dsn`` it
works in a new schema of that database, dropped when the drill passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from gateway._support.parent_watch import child_command
from gateway.drill._common import (
    PRIMARY,
    SECONDARY,
    Progress,
    new_state_dir,
    remove_state_dir,
    require_postgres,
)
from gateway.drill.outbox._report import OutboxDrillReport
from gateway.drill.outbox._shared import DESTINATIONS, ORDERS_TABLE
from gateway.geo import AsyncGeoReceiver
from gateway.stores import EmbeddedPostgres, Outbox, PostgresOutbox, SqliteOutbox
from gateway.transports.base import ReceivedMessage
from gateway.transports.local import LocalNamespace
from replication import ConfigError, Mode

__all__ = ["OUTBOX_SCENARIO", "STORES", "run_outbox_drill"]

logger = logging.getLogger("geogateway.drill")

OUTBOX_SCENARIO = "outbox"
STORES = ("sqlite", "postgres")
_PROJECT = str(Path(__file__).resolve().parents[2])
_DISPATCHERS = ("d1", "d2")
_LEASE = 2.0  # a killed dispatcher's SQLite destinations are free again after this
_ACK_DELAY = 0.05  # d2's sends return up to this long after the namespaces took them
_POLL = 0.05
_STOP_TIMEOUT = 15.0


async def run_outbox_drill(
    *, store: str = "sqlite", dsn: str | None = None, orders: int = 1000,
    mode: Mode | str | None = None, batch_size: int = 20, kills: int = 4,
    data_dir: str | Path | None = None, settle_timeout: float = 60.0,
    keep_state: bool = False, on_state_dir: Callable[[Path], None] | None = None,
    progress: Progress | None = None, seed: int | None = None,
) -> OutboxDrillReport:
    """Run the outbox drill (see the module docstring) and return its report.

    Args:
        store: ``"sqlite"`` (the outbox in the application's SQLite file) or
            ``"postgres"``.
        dsn: a PostgreSQL server to use instead of starting one (postgres only).
        orders: orders the application makes (committed or rolled back).
        mode: the dispatchers' replication mode (default passive).
        batch_size: rows per send.
        kills: dispatcher SIGKILLs during the run.
        data_dir: where the run's state folder is made (default: the temp directory);
            removed when the drill passes unless ``keep_state``.
        settle_timeout: seconds to wait for delivery once the application is done.
        on_state_dir: called with the state folder before anything runs.
        progress: called as ``progress(phase, done, total)``.
        seed: for the rollbacks and the kills (default: random).

    Raises:
        ConfigError: an unknown store, a ``dsn`` with SQLite, a bad count, or
            PostgreSQL without the postgres extra (before any folder is made).
    """
    if store not in STORES:
        raise ConfigError(f"unknown store {store!r}: use one of {', '.join(STORES)}")
    if dsn is not None and store != "postgres":
        raise ConfigError("a DSN is for --store postgres")
    if orders < 1 or batch_size < 1 or kills < 0:
        raise ConfigError("orders and batch_size must be >= 1, kills >= 0")
    if store == "postgres":
        require_postgres("outbox drill", server=dsn is None)
    root = new_state_dir(data_dir)
    if on_state_dir is not None:
        on_state_dir(root)
    drill = _OutboxDrill(root, store, orders, Mode.parse(mode or Mode.PASSIVE), batch_size,
                         kills, progress or (lambda phase, done, total: None),
                         random.Random(seed))
    report = await drill.run(dsn, settle_timeout)
    if report.passed and not keep_state:
        await drill.drop_schema()
        if remove_state_dir(root):
            return report
    return dataclasses.replace(report, state_dir=str(root))


class _OutboxDrill:
    def __init__(self, root: Path, store: str, orders: int, mode: Mode, batch_size: int,
                 kills: int, progress: Progress, rng: random.Random) -> None:
        self.root, self.store, self.orders, self.mode = root, store, orders, mode
        self.batch_size, self.kills, self.progress, self.rng = batch_size, kills, progress, rng
        self.namespaces = root / "namespaces"
        for name in (PRIMARY, SECONDARY):
            with LocalNamespace(name, data_dir=self.namespaces) as namespace:
                for entity in DESTINATIONS:
                    namespace.create_queue(entity, lock_duration=5.0, max_delivery_count=100)
        (root / "logs").mkdir()
        self.schema = f"drill_{uuid.uuid4().hex[:12]}"
        self.target = ""
        self.outbox: Outbox | None = None
        self.server: EmbeddedPostgres | None = None
        self.dispatchers: dict[str, asyncio.subprocess.Process] = {}
        self.made_kills = 0
        self.effects: Counter[str] = Counter()
        self.last_seq: dict[str, int] = {}
        self.out_of_order = 0
        self.committed_so_far = 0

    async def run(self, dsn: str | None, settle_timeout: float) -> OutboxDrillReport:
        started = time.monotonic()
        try:
            self.outbox = await asyncio.to_thread(self._open_store, dsn)
            stop = asyncio.Event()
            receivers = [AsyncGeoReceiver(
                primary=f"local://{PRIMARY}", secondary=f"local://{SECONDARY}", entity=entity,
                dedup_store=self.root / "dedup.db", data_dir=self.namespaces, poll_wait=0.1)
                for entity in DESTINATIONS]
            tasks = [asyncio.create_task(r.run(self._handle, stop=stop)) for r in receivers]
            try:
                for name in _DISPATCHERS:
                    await self._start_dispatcher(name)
                committed = await self._run_app()
                await self._settle(committed, settle_timeout)
                await asyncio.sleep(0.5)  # a late duplicate would still be counted
            finally:
                await self._stop_dispatchers()
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                for receiver in receivers:
                    await receiver.aclose()
            removed = sum(r.stats.duplicates_suppressed for r in receivers)
            left = (await asyncio.to_thread(self.outbox.stats)).waiting
            rolled = self._rolled_back()
            return OutboxDrillReport(
                store=self.store, mode=self.mode.value, orders=self.orders,
                committed=len(committed), rolled_back=len(rolled),
                delivered=sum(1 for m in committed if m in self.effects),
                lost=sum(1 for m in committed if m not in self.effects),
                rolled_back_delivered=sum(1 for m in rolled if m in self.effects),
                duplicate_effects=sum(n - 1 for n in self.effects.values() if n > 1),
                copies_removed=removed, out_of_order=self.out_of_order, left_in_outbox=left,
                dispatcher_kills=self.made_kills, planned_kills=self.kills,
                dispatchers=len(_DISPATCHERS),
                elapsed_seconds=round(time.monotonic() - started, 3))
        finally:
            if self.outbox is not None:
                self.outbox.close()
            if self.server is not None:
                await asyncio.to_thread(self.server.stop, mode="fast")

    # -- the store --------------------------------------------------------------------

    def _open_store(self, dsn: str | None) -> Outbox:
        if self.store == "sqlite":
            self.target = str(self.root / "app.db")
            return SqliteOutbox(self.target)
        if dsn is None:
            self.server = EmbeddedPostgres(self.root / "pg", fsync=False)
            dsn = self.server.start()
        self.target = dsn
        return PostgresOutbox(dsn, schema=self.schema)

    async def drop_schema(self) -> None:
        """Drop the drill's schema from a server the user gave (its own is removed)."""
        if self.store != "postgres" or self.server is not None:
            return

        def drop() -> None:
            import psycopg

            with psycopg.connect(self.target, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

        with contextlib.suppress(Exception):
            await asyncio.to_thread(drop)

    def _committed(self) -> dict[str, str]:
        """The committed orders: message id -> destination."""
        query = f"SELECT message_id, entity FROM {{}}{ORDERS_TABLE}"
        if self.store == "sqlite":
            import sqlite3

            with contextlib.closing(sqlite3.connect(self.target, timeout=30.0)) as conn:
                return dict(conn.execute(query.format("")).fetchall())
        import psycopg

        with psycopg.connect(self.target) as conn:
            return {str(m): str(e) for m, e in
                    conn.execute(query.format(f"{self.schema}.")).fetchall()}

    def _rolled_back(self) -> list[str]:
        path = self.root / "rolled-back.txt"
        return path.read_text("utf-8").split() if path.exists() else []

    # -- the receiver -----------------------------------------------------------------

    async def _handle(self, received: ReceivedMessage) -> None:
        message = received.message
        self.effects[message.message_id] += 1
        entity, seq = str(message.properties.get("entity")), message.properties.get("seq")
        if isinstance(seq, int):
            if seq < self.last_seq.get(entity, 0):
                self.out_of_order += 1
            self.last_seq[entity] = max(seq, self.last_seq.get(entity, 0))

    # -- the processes ----------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT, env.get("PYTHONPATH", "")) if p)
        env.update(GEOGATEWAY_OUTBOX=self.target, GEOGATEWAY_DRILL_SCHEMA=self.schema,
                   GEOGATEWAY_STATE_DIR=str(self.root / "state"))
        for name in ("GEOGATEWAY_CONFIG", "GEOGATEWAY_PRIMARY", "GEOGATEWAY_SECONDARY",
                     "GEOGATEWAY_DURABLE_QUEUE", "GEOGATEWAY_ENTITY"):
            env.pop(name, None)  # the drill's own namespaces, nothing of the user's
        return env

    async def _spawn(self, name: str, args: list[str],
                     stdout: int | None = None) -> asyncio.subprocess.Process:
        command, fds = child_command(args)
        log = await asyncio.to_thread(open, self.root / "logs" / f"{name}.log", "ab")
        with log:
            return await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=stdout or log, stderr=log,
                env=self._env(), pass_fds=fds)

    async def _start_dispatcher(self, name: str) -> None:
        common = ["--mode", self.mode.value, "--batch", str(self.batch_size),
                  "--lease", str(_LEASE)]
        if name == "d1":
            args = ["-m", "gateway.cli", "outbox", "run", "--schema", self.schema,
                    "--data-dir", str(self.namespaces), "--concurrency", "2", *common]
        else:
            args = ["-m", "gateway.drill.outbox._dispatcher", "--store", self.store,
                    "--namespaces", str(self.namespaces), "--ack-delay", str(_ACK_DELAY),
                    *common]
        self.dispatchers[name] = await self._spawn(name, args)

    async def _kill_one(self) -> None:
        name = self.rng.choice(_DISPATCHERS)
        process = self.dispatchers[name]
        if process.returncode is None:
            await asyncio.sleep(self.rng.uniform(0, 0.03))  # a random moment of its work
            process.send_signal(signal.SIGKILL)
            await process.wait()
            self.made_kills += 1
        elif process.returncode != 0:
            raise RuntimeError(f"dispatcher {name} exited with {process.returncode}; see "
                               f"{self.root / 'logs' / f'{name}.log'}")
        await self._start_dispatcher(name)

    async def _run_app(self) -> dict[str, str]:
        app = await self._spawn("app", [
            "-m", "gateway.drill.outbox._app", "--root", str(self.root), "--store", self.store,
            "--orders", str(self.orders), "--seed", str(self.rng.randrange(1 << 30))],
            stdout=asyncio.subprocess.PIPE)
        expected = max(1, self.orders * 6 // 7)
        marks = [expected * (k + 1) // (self.kills + 1) for k in range(self.kills)]
        assert app.stdout is not None
        async for line in app.stdout:
            words = line.decode().split()
            if len(words) == 2 and words[0] in ("committed", "done"):
                self.committed_so_far = int(words[1])
                self.progress("committed", min(self.committed_so_far, expected), expected)
            while marks and (self.committed_so_far >= marks[0] or words[:1] == ["done"]):
                marks.pop(0)
                await self._kill_one()
        while marks:  # the application ended early: the kills still happen
            marks.pop(0)
            await self._kill_one()
        if await app.wait() != 0:
            raise RuntimeError(f"the drill's application exited with {app.returncode}; see "
                               f"{self.root / 'logs' / 'app.log'}")
        return await asyncio.to_thread(self._committed)

    async def _settle(self, committed: dict[str, str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            delivered = sum(1 for m in committed if m in self.effects)
            self.progress("delivered", delivered, len(committed))
            if delivered == len(committed):
                assert self.outbox is not None
                if (await asyncio.to_thread(self.outbox.stats)).waiting == 0:
                    return
            await asyncio.sleep(_POLL)

    async def _stop_dispatchers(self) -> None:
        for process in self.dispatchers.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for name, process in self.dispatchers.items():
            try:
                await asyncio.wait_for(process.wait(), _STOP_TIMEOUT)
            except asyncio.TimeoutError:
                logger.warning("dispatcher %s did not stop in %g s: killed; see %s", name,
                               _STOP_TIMEOUT, self.root / "logs" / f"{name}.log")
                process.kill()
                await process.wait()
