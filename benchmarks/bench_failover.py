"""Benchmark failover time: the default drill, active mode, flapping, and another process.

    .venv/bin/python benchmarks/bench_failover.py [--trials 20] [--other-trials 10]
        [--messages 2000] [--cross-process 10] [--transport local|servicebus|eventhubs]

With ``--transport servicebus`` or ``eventhubs`` the drills run over the Azure SDK
transports against two emulated namespaces (``geogateway emulator``, started by each
drill), the target is p99 <= 0.1 s as locally, and the cross-process row is left out (the drill
injects the emulated outages itself; its clock starts once the emulator applied one).

Runs ``run_drill`` with its default settings (passive, primary-outage, one message
per ``send_batch``, the default ``ReplicationPolicy``, a durable queue) ``--trials``
times, and active/primary-outage and passive/flapping ``--other-trials`` times
each, all with ``--messages`` per drill (the drill's default is 10,000; 2,000 keeps
the whole run near three minutes and does not change what is timed). A drill's
failover time runs from the moment it takes the namespace down (between two
sends) to the end of the first send, started after that, that the other
namespace accepted.

The cross-process row takes the primary down from another process, as an
operator would: ``geogateway namespace down primary --data-dir DIR`` runs as a
subprocess while an ``AsyncGeoSender`` (the drill's settings) sends one message
at a time in a loop; it measures from the subprocess's return (its exit as seen
by this process) to the end of the first send the secondary accepted, and, as a
second figure, from the control file's modification time (when the outage took
effect) to that same moment.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gateway.drill import DrillReport, run_drill
from gateway.geo.sender._sender import AsyncGeoSender
from gateway.transports.local import LocalNamespace
from replication import Message

# Issue 21: failover from a refusing namespace in one round trip, p99 <= 0.1 s, locally
# and over both SDK transports (it was <= 1 s locally and <= 2 s over the SDKs before).
TARGET = 0.1
SDK_TARGET = 0.1
ENTITY = "bench"
CLI = Path(sys.executable).with_name("geogateway")

# Context from the brief: not measured here.
REFERENCES = [
    ("azure-servicebus default retry gives up", "~12 s"),
    ("azure-eventhub default retry gives up", "~24 s"),
    ("Geo-Replication promotion (manual)", "5-10 min"),
]


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def drills(
    console: Console, label: str, mode: str, scenario: str, trials: int, messages: int,
    transport: str = "local",
) -> tuple[list[float], int]:
    samples: list[float] = []
    passed = 0
    for i in range(trials):
        report: DrillReport = await run_drill(mode=mode, scenario=scenario, messages=messages,
                                              transport=transport)
        samples.extend(report.failover_seconds)
        passed += report.passed
        console.print(
            f"  {label} {i + 1}/{trials}: failover {report.failover_seconds} s, "
            f"lost {report.lost}, duplicates {report.duplicates_delivered}, "
            f"{report.elapsed_seconds:.1f} s"
        )
    return samples, passed


async def cross_process_once(root: Path) -> tuple[float, float, float]:
    """(from subprocess return, from control-file write, subprocess run time) in s."""
    data = root / "namespaces"
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=data) as ns:
            ns.create_queue(ENTITY)
    accepted: list[tuple[float, float, tuple[str, ...]]] = []  # (monotonic, wall, namespaces)
    stop, failed_over = asyncio.Event(), asyncio.Event()

    async def pump(sender: AsyncGeoSender) -> None:
        i = 0
        while not stop.is_set():
            result = await sender.send(Message(b"x" * 64, message_id=f"x-{i:08d}"))
            accepted.append((time.monotonic(), time.time(), result.namespaces))
            if "secondary" in result.namespaces:
                failed_over.set()
            i += 1

    def on_secondary() -> tuple[float, float] | None:
        return next(((m, w) for m, w, ns in accepted if "secondary" in ns), None)

    async with AsyncGeoSender(
        primary="local://primary", secondary="local://secondary", entity=ENTITY,
        durable_queue=root / "buffer.db", data_dir=data, state_dir=root / "state",
    ) as sender:
        sending = asyncio.create_task(pump(sender))
        try:
            await asyncio.sleep(0.3)  # steady sending to the primary first
            assert accepted and on_secondary() is None, "not sending to the primary"
            spawned = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                str(CLI), "namespace", "down", "primary", "--data-dir", str(data),
                stdout=asyncio.subprocess.DEVNULL,
            )
            if await proc.wait() != 0:
                raise RuntimeError("geogateway namespace down failed")
            returned = time.monotonic()
            await asyncio.wait_for(failed_over.wait(), timeout=10.0)
            first = on_secondary()
            assert first is not None
        finally:
            stop.set()
            await sending
    written = os.stat(data / "primary.control.json").st_mtime_ns / 1e9
    return first[0] - returned, first[1] - written, returned - spawned


async def run(args: argparse.Namespace, console: Console) -> None:
    rows: list[tuple[str, list[float], str]] = []
    started = time.monotonic()
    groups = [
        ("passive, primary-outage (default drill)", "passive", "primary-outage", args.trials),
        ("active, primary-outage", "active", "primary-outage", args.other_trials),
        ("passive, flapping (3 outages per drill)", "passive", "flapping", args.other_trials),
    ]
    for label, mode, scenario, trials in groups:
        console.print(f"{label}: {trials} drills of {args.messages:,} messages")
        samples, passed = await drills(console, label.split(",")[0], mode, scenario, trials,
                                       args.messages, args.transport)
        rows.append((label, samples, f"{passed}/{trials}"))
    target = TARGET if args.transport == "local" else SDK_TARGET
    if args.transport != "local":
        args.cross_process = 0
    console.print(f"cross-process: {args.cross_process} runs of `geogateway namespace down`")
    from_return: list[float] = []
    from_write: list[float] = []
    run_time: list[float] = []
    for i in range(args.cross_process):
        with tempfile.TemporaryDirectory(prefix="geogateway-bench-") as tmp:
            a, b, c = await cross_process_once(Path(tmp))
        from_return.append(a)
        from_write.append(b)
        run_time.append(c)
        console.print(f"  run {i + 1}: {a * 1e3:.0f} ms after the subprocess returned, "
                      f"{b * 1e3:.0f} ms after the control file was written "
                      f"(subprocess ran {c * 1e3:.0f} ms)")
    if from_return:
        rows.append(("other process: from subprocess return", from_return, ""))
        rows.append(("  same, from the control-file write", from_write, ""))
    elapsed = time.monotonic() - started

    table = Table(title=f"Failover time, default settings, transport {args.transport} "
                        f"({elapsed:.0f} s run)")
    for column in ("scenario", "drills ok", "samples", "p50", "p90", "p99", "max",
                   "target (p99)", ""):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for label, samples, ok_drills in rows:
        p99 = percentile(samples, 0.99)
        ok = "PASS" if p99 <= target else "FAIL"
        table.add_row(
            label, ok_drills, str(len(samples)),
            *(f"{percentile(samples, q) * 1e3:.0f} ms" for q in (0.5, 0.9, 0.99)),
            f"{max(samples) * 1e3:.0f} ms", f"<= {target:g} s", ok,
            style="green" if ok == "PASS" else "red",
        )
    for label, value in REFERENCES if args.transport == "local" else []:
        table.add_row(f"reference: {label}", "", "not measured", "", "", value, "", "",
                      "", style="dim")
    console.print(table)
    if run_time:
        console.print(f"subprocess run time (spawn to exit): median "
                      f"{statistics.median(run_time) * 1e3:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="default drills (passive)")
    parser.add_argument("--other-trials", type=int, default=10,
                        help="active and flapping drills, each")
    parser.add_argument("--messages", type=int, default=2_000, help="messages per drill")
    parser.add_argument("--cross-process", type=int, default=10,
                        help="runs with the namespace taken down by another process")
    parser.add_argument("--transport", choices=("local", "servicebus", "eventhubs"),
                        default="local", help="the drills' transport")
    args = parser.parse_args()
    logging.getLogger("azure").setLevel(logging.CRITICAL)  # mapped errors say enough
    # The drills log every outage and failover as warnings; the table says it all.
    logging.getLogger("geogateway").setLevel(logging.ERROR)
    console = Console(width=150)
    asyncio.run(run(args, console))


if __name__ == "__main__":
    main()
