"""Benchmark the first send after the active namespace hangs, against a clean outage.

    .venv/bin/python benchmarks/bench_hang.py [--trials 20] [--warmup 50] [--interval 0.01]
        [--transport local servicebus eventhubs] [--mode passive active]

For each transport, mode and fault, ``--trials`` times: a new ``AsyncGeoSender``
(default ``ReplicationPolicy``, a durable queue, the background recovery running, as an
application would run it) sends one message every ``--interval`` seconds, ``--warmup``
of them, so that the primary's send deadline has adapted to what it normally takes;
then the fault is injected between two sends, and the next send is timed from the
moment the fault is in effect to its return. The fault is lifted and the sender closed
before the next trial (each trial has its own role state).

Faults, all in the same run:

* ``hang``: ``FaultyTransport.hang()`` on the primary (every operation waits, never
  answers): at its deadline, passive mode hedges the send to the secondary, active mode
  returns with the secondary's copy taken and the primary's buffered;
* ``clean outage``: ``FaultyTransport.go_down()`` on the primary (every operation fails
  at once): the reference a hang is compared with;
* with ``servicebus`` / ``eventhubs`` only, each namespace is served by its own
  ``geogateway emulator`` process: ``SIGSTOP`` of the primary's (the freeze of the issue:
  connections stay open, nothing answers), and the same with the deadlines out of the
  way (``DeadlinePolicy(floor=ceiling=initial=60)``): what a send took before them,
  bounded by the SDK transport's own ``operation_timeout``.

The table gives p50, p99 and max of the first send after the fault, how many of those
sends the secondary took, and how many warm-up sends were hedged, or returned without a
namespace's answer, although nothing was wrong (false alarms). Target: p99 <= 1 s for a
hang, as for a clean outage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gateway.emulator._process import EmulatorProcess
from gateway.geo.sender._sender import AsyncGeoSender
from gateway.transports import FaultyTransport, LocalNamespace, LocalTransport
from gateway.transports.base import Transport
from gateway.transports.eventhubs import EventHubsTransport
from gateway.transports.servicebus import ServiceBusTransport
from replication import DeadlinePolicy, Message, Mode, ReplicationPolicy

QUEUE, HUB = "bench", "bench-events"
TARGET = 1.0
#: Deadlines out of the way: what a send to a frozen namespace took before them.
NO_DEADLINES = ReplicationPolicy(deadlines=DeadlinePolicy(floor=60, ceiling=60, initial=60))


@dataclass
class Row:
    transport: str
    mode: str
    fault: str
    seconds: list[float] = field(default_factory=list)
    to_secondary: int = 0
    false_alarms: int = 0
    warm_sends: int = 0


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class Namespaces:
    """How a trial opens the two namespaces, and the primary's emulator (SDK only)."""

    open: Callable[[str], Transport]
    entity: str
    primary_pid: int | None = None


@contextlib.asynccontextmanager
async def namespaces(kind: str, root: Path) -> AsyncIterator[Namespaces]:
    data = root / "namespaces"
    if kind == "local":
        for name in ("primary", "secondary"):
            with LocalNamespace(name, data_dir=data) as ns:
                ns.create_queue(QUEUE)
        yield Namespaces(lambda name: LocalTransport(name, data_dir=data), QUEUE)
        return
    # One emulator process per namespace, so that SIGSTOP freezes the primary only.
    async with EmulatorProcess(("primary",), data_dir=data, queues=(QUEUE,),
                               event_hubs={HUB: 4}, log=root / "primary.log") as first, \
            EmulatorProcess(("secondary",), data_dir=data, queues=(QUEUE,),
                            event_hubs={HUB: 4}, log=root / "secondary.log") as second:
        strings = {"primary": first.connection_string("primary"),
                   "secondary": second.connection_string("secondary")}
        cls = ServiceBusTransport if kind == "servicebus" else EventHubsTransport

        def open_sdk(name: str) -> Transport:
            return cls.from_connection_string(strings[name], name=name)

        yield Namespaces(open_sdk, QUEUE if kind == "servicebus" else HUB, first.pid)


async def trial(row: Row, spaces: Namespaces, fault: str, root: Path, n: int,
                warmup: int, interval: float) -> None:
    primary = FaultyTransport(spaces.open("primary"))
    secondary = FaultyTransport(spaces.open("secondary"))
    policy = replace(NO_DEADLINES if "before" in fault else ReplicationPolicy(),
                     mode=Mode.parse(row.mode))
    stopped = False
    try:
        async with AsyncGeoSender(primary=primary, secondary=secondary, entity=spaces.entity,
                                  policy=policy, durable_queue=root / f"queue-{n}.db",
                                  state_dir=root / f"state-{n}") as sender:
            for i in range(warmup):
                result = await sender.send(Message(b"w" * 64, message_id=f"{n}-w{i}"))
                row.warm_sends += 1
                row.false_alarms += result.hedged or bool(result.unanswered)
                await asyncio.sleep(interval)
            assert sender.roles.active == "primary", "failed over before the fault"
            if fault.startswith("hang"):
                primary.hang()
            elif fault.startswith("clean"):
                primary.go_down()
            else:
                assert spaces.primary_pid is not None
                os.kill(spaces.primary_pid, signal.SIGSTOP)
                stopped = True
            began = time.perf_counter()
            result = await sender.send(Message(b"x" * 64, message_id=f"{n}-first"))
            row.seconds.append(time.perf_counter() - began)
            row.to_secondary += "secondary" in result.namespaces
    finally:
        if stopped:
            assert spaces.primary_pid is not None
            os.kill(spaces.primary_pid, signal.SIGCONT)
        primary.unhang()
        primary.come_up()
        await primary.aclose()
        await secondary.aclose()


async def measure(kind: str, modes: list[str], faults: list[str], trials: int, warmup: int,
                  interval: float, console: Console) -> list[Row]:
    rows = [Row(kind, mode, fault) for mode in modes for fault in faults]
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-hang-") as tmp:
        root = Path(tmp)
        async with namespaces(kind, root) as spaces:
            n = 0
            for t in range(trials):
                # Interleaved, so that load from other jobs hits every fault alike.
                for row in rows[t % len(rows):] + rows[:t % len(rows)]:
                    n += 1
                    await trial(row, spaces, row.fault, root, n, warmup, interval)
                    await asyncio.sleep(0.2)  # let a resumed emulator catch up
                console.print(f"  {kind} trial {t + 1}/{trials}: " + ", ".join(
                    f"{r.mode} {r.fault} {r.seconds[-1] * 1e3:.0f} ms" for r in rows))
    return rows


def table(rows: list[Row], elapsed: float, args: argparse.Namespace) -> Table:
    t = Table(title=f"First send after the active namespace hangs vs a clean outage "
                    f"({args.trials} trials each, a send every {args.interval * 1e3:.0f} ms, "
                    f"{elapsed:.0f} s run)")
    for column in ("transport", "mode", "fault", "p50", "p99", "max", "secondary took it",
                   "false alarms (warm-up)", "target (p99)", ""):
        t.add_column(column,
                     justify="left" if column in ("transport", "mode", "fault") else "right")
    for row in rows:
        p50, p99 = percentile(row.seconds, 0.5), percentile(row.seconds, 0.99)
        judged = "before" not in row.fault
        ok = "PASS" if p99 <= TARGET else "FAIL"
        t.add_row(row.transport, row.mode, row.fault, f"{p50 * 1e3:.0f} ms", f"{p99 * 1e3:.0f} ms",
                  f"{max(row.seconds) * 1e3:.0f} ms",
                  f"{row.to_secondary}/{len(row.seconds)}",
                  f"{row.false_alarms}/{row.warm_sends}",
                  f"<= {TARGET:.0f} s" if judged else "(reference)", ok if judged else "",
                  style=None if not judged else ("green" if ok == "PASS" else "red"))
    return t


async def run(args: argparse.Namespace, console: Console) -> None:
    began = time.monotonic()
    rows: list[Row] = []
    for kind in args.transport:
        faults = ["hang", "clean outage"]
        if kind != "local":
            faults += ["SIGSTOP of its emulator", "SIGSTOP, before (no deadlines)"]
        console.print(f"{kind}: {', '.join(faults)}")
        rows += await measure(kind, args.mode, faults, args.trials, args.warmup,
                              args.interval, console)
    console.print(table(rows, time.monotonic() - began, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=50, help="sends before the fault")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between sends")
    parser.add_argument("--transport", nargs="+", default=["local", "servicebus", "eventhubs"],
                        choices=("local", "servicebus", "eventhubs"))
    parser.add_argument("--mode", nargs="+", default=["passive", "active"],
                        choices=("passive", "active"))
    args = parser.parse_args()
    logging.getLogger("azure").setLevel(logging.CRITICAL)  # mapped errors say enough
    # Every fault logs the namespace going down and the failover: the table says it all.
    logging.getLogger("geogateway").setLevel(logging.ERROR)
    asyncio.run(run(args, Console(width=160)))


if __name__ == "__main__":
    main()
