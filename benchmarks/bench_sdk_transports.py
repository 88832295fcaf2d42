"""Benchmark the gateway over the Azure SDK transports against the emulator.

    .venv/bin/python benchmarks/bench_sdk_transports.py [--rounds 5] [--cycles 3] [--chunk 20]
        [--batch 100 1] [--profile]

Starts ``geogateway emulator`` (a child process; namespaces ``primary`` and
``secondary``, the queue ``bench`` and the event hub ``bench-events`` with 4
partitions) and, in the same run and the same event loop, sends batches of 100
(then single messages: ``--batch``) of 1 KiB through:

* Service Bus, raw: one ``ServiceBusSender`` (azure-servicebus), ``send_messages``
  of a ``ServiceBusMessageBatch`` built from the messages;
* Service Bus, gateway: ``AsyncGeoSender`` (passive) over ``ServiceBusTransport``,
  ``send_batch`` of the same ``Message`` list;
* Event Hubs, raw: one ``EventHubProducerClient``, ``send_batch`` of an
  ``EventDataBatch`` of events with their ``message_id`` set;
* Event Hubs, gateway: ``AsyncGeoSender`` (passive) over ``EventHubsTransport``.

Passive sends go to one namespace, like the raw client. Every variant is connected
and warmed up (one untimed batch) before timing. A round rotates through the
variants ``--cycles`` times, each sending ``--chunk`` batches in turn, in a rotated
order; the table shows the median messages/s over ``--rounds`` rounds and the median
per-round overhead (gateway time / raw time in the same round - 1). The emulator's
CPU time (user + system, from ``/proc/PID/stat``) is read around every chunk and
divided by the messages of that variant: the emulator's own cost per message.

``--profile`` also runs ``cProfile`` (timed by CPU time) in the emulator child over the
timed rounds (``emulator_profile/sitecustomize.py``, switched by SIGUSR1) and prints,
after each table, where the emulator's CPU went by what the code does (a builtin's
time is counted where it was called from) and its top functions. The profiler makes
everything slower (about 4x for single sends, 9x in batches, where the many small
decoding calls pay the most): read shares, not times.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.eventhub import EventData
from azure.eventhub.aio import EventHubProducerClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from rich.console import Console
from rich.table import Table

from gateway.emulator._process import EmulatorProcess
from gateway.geo._config import NamespaceConfig
from gateway.geo.sender._sender import AsyncGeoSender
from replication import Message

QUEUE, HUB = "bench", "bench-events"
PROFILE_HOOK = Path(__file__).resolve().parent / "emulator_profile"
#: What the emulator's code does, by where it is (first match wins).
GROUPS = (
    ("decoding the messages (AMQP sections -> local messages)",
     ("amqp/_decode.py", "amqp/_message.py", "amqp/_convert.py", "amqp/_types.py",
      "server/_convert.py", "replication/_message.py")),
    ("tenacity around the SQLite transaction", ("tenacity/",)),
    ("storing them (SQLite transaction)",
     ("transports/_local", "transports/local/", "durable_queue/", "sqlite3")),
    ("reading frames, encoding dispositions",
     ("amqp/_frames.py", "amqp/_performative", "amqp/_composites.py", "amqp/_encode.py")),
    ("links, sessions, connection, namespace (incl. the control file's stat)",
     ("gateway/emulator/", "gateway/amqp/server/")),
    ("event loop and sockets", ("asyncio/", "selectors.py")),
)
BODY = 1024
TARGET = 0.15


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as fp:
        fields = fp.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Variant:
    name: str
    send: Callable[[], Awaitable[None]]
    seconds: list[float] = field(default_factory=list)  # per round
    cpu: list[float] = field(default_factory=list)      # emulator CPU s per round
    messages: list[int] = field(default_factory=list)   # per round


async def make_variants(emu: EmulatorProcess, root: Path, batch: list[Message],
                        closers: list[Callable[[], Awaitable[Any]]]) -> list[Variant]:
    sb_conn, eh_conn = emu.connection_string("primary"), emu.connection_string("primary")
    client = ServiceBusClient.from_connection_string(sb_conn)
    sb_sender = client.get_queue_sender(QUEUE)
    await sb_sender.__aenter__()
    closers += [sb_sender.close, client.close]

    async def sb_raw() -> None:
        out = await sb_sender.create_message_batch()
        for m in batch:
            out.add_message(ServiceBusMessage(m.body, message_id=m.message_id))
        await sb_sender.send_messages(out)

    producer = EventHubProducerClient.from_connection_string(eh_conn, eventhub_name=HUB)
    closers.append(producer.close)

    async def eh_raw() -> None:
        out = await producer.create_batch()
        for m in batch:
            event = EventData(m.body)
            event.message_id = m.message_id  # what de-duplication needs, as the gateway sends
            out.add(event)
        await producer.send_batch(out)

    def gateway(kind: str, entity: str) -> AsyncGeoSender:
        primary, secondary = (
            NamespaceConfig(connection_string=emu.connection_string(n), name=n, kind=kind)
            for n in ("primary", "secondary"))
        sender = AsyncGeoSender(primary=primary, secondary=secondary, entity=entity,
                                mode="passive", data_dir=root / "namespaces",
                                state_dir=root / f"state-{kind}")
        closers.append(sender.aclose)
        return sender

    sb_gw, eh_gw = gateway("servicebus", QUEUE), gateway("eventhubs", HUB)

    async def sb_gateway() -> None:
        await sb_gw.send_batch(batch)

    async def eh_gateway() -> None:
        await eh_gw.send_batch(batch)

    variants = [Variant("servicebus raw SDK", sb_raw), Variant("servicebus gateway", sb_gateway),
                Variant("eventhubs raw SDK", eh_raw), Variant("eventhubs gateway", eh_gateway)]
    for v in variants:  # connect and warm up, untimed
        await v.send()
    return variants


async def measure(rounds: int, cycles: int, chunk: int, size: int,
                  profile: Path | None = None) -> list[Variant]:
    batch = [Message(os.urandom(BODY // 2).hex().encode(), message_id=f"bench-{i}")
             for i in range(size)]
    with tempfile.TemporaryDirectory(prefix="geogateway-bench-sdk-") as tmp:
        root = Path(tmp)
        if profile is not None:  # read by emulator_profile/sitecustomize.py in the child
            os.environ["GEOGATEWAY_BENCH_PROFILE"] = str(profile)
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(PROFILE_HOOK), os.environ.get("PYTHONPATH", "")) if p)
        async with EmulatorProcess(("primary", "secondary"), data_dir=root / "namespaces",
                                   queues=(QUEUE,), event_hubs={HUB: 4},
                                   log=root / "emulator.log") as emu:
            closers: list[Callable[[], Awaitable[Any]]] = []
            try:
                variants = await make_variants(emu, root, batch, closers)
                if profile is not None:
                    os.kill(emu.pid, signal.SIGUSR1)  # start profiling
                for r in range(rounds):
                    for v in variants:
                        v.seconds.append(0.0)
                        v.cpu.append(0.0)
                        v.messages.append(0)
                    for c in range(cycles):
                        shift = (r * cycles + c) % len(variants)
                        for v in variants[shift:] + variants[:shift]:
                            cpu0, t0 = cpu_seconds(emu.pid), time.perf_counter()
                            for _ in range(chunk):
                                await v.send()
                            v.seconds[-1] += time.perf_counter() - t0
                            v.cpu[-1] += cpu_seconds(emu.pid) - cpu0
                            v.messages[-1] += chunk * size
                if profile is not None:
                    os.kill(emu.pid, signal.SIGUSR1)  # stop and write profile.0.prof
                    written = Path(f"{profile}.0.prof")
                    for _ in range(100):
                        if await asyncio.to_thread(written.exists):
                            break
                        await asyncio.sleep(0.1)
            finally:
                for close in reversed(closers):
                    await close()
    return variants


def table(variants: list[Variant], rounds: int, size: int) -> Table:
    t = Table(title=f"send path over the SDK transports against the emulator, batches of "
                    f"{size} x {BODY} B, median of {rounds} rounds")
    for col in ("variant", "messages/s", "emulator CPU per message", "overhead vs raw SDK",
                "target", ""):
        t.add_column(col)
    by = {v.name: v for v in variants}
    for kind in ("servicebus", "eventhubs"):
        raw, gw = by[f"{kind} raw SDK"], by[f"{kind} gateway"]
        for v in (raw, gw):
            rate = statistics.median(m / s for m, s in zip(v.messages, v.seconds, strict=True))
            cpu = statistics.median(c / m for c, m in zip(v.cpu, v.messages, strict=True))
            if v is raw:
                t.add_row(v.name, f"{rate:,.0f}", f"{cpu * 1e6:.0f} µs", "(reference)", "", "")
                continue
            over = statistics.median(g / r - 1 for g, r in zip(gw.seconds, raw.seconds,
                                                               strict=True))
            t.add_row(v.name, f"{rate:,.0f}", f"{cpu * 1e6:.0f} µs", f"{over:+.1%}",
                      f"<= {TARGET:.0%}", "PASS" if over <= TARGET else "FAIL")
    return t


def profile_table(path: Path, size: int, top: int = 15) -> Table:
    """Where the emulator's CPU went, by what its code does, and its top functions."""
    stats: dict[Any, Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]

    def group(key: tuple[str, int, str]) -> str | None:
        where = f"{key[0]}:{key[2]}"
        return next((name for name, parts in GROUPS if any(p in where for p in parts)), None)

    spent: dict[str, float] = {name: 0.0 for name, _ in GROUPS}
    spent["other (logging, dataclasses, ...)"] = 0.0
    for key, (_, _, own, _, callers) in stats.items():
        name = group(key)
        if name is None and key[0] == "~" and callers:  # a builtin: where it was called
            for caller, edge in callers.items():
                spent[group(caller) or "other (logging, dataclasses, ...)"] += edge[2]
            continue
        spent[name or "other (logging, dataclasses, ...)"] += own
    total = sum(spent.values()) or 1.0
    t = Table(title=f"the emulator's CPU, batches of {size}: cProfile over the timed rounds")
    t.add_column("what")
    t.add_column("share", justify="right")
    for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        t.add_row(name, f"{seconds / total:.1%}")
    t.add_section()
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (file, line, func), (_, calls, own, _, _) in ranked:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if file != "~" else ""
        t.add_row(f"{where}({func}) x {calls:,}", f"{own / total:.1%}")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--batch", type=int, nargs="+", default=[100, 1],
                        help="messages per send call; one table per size")
    parser.add_argument("--profile", action="store_true",
                        help="profile the emulator child over the timed rounds and print "
                             "where its CPU went")
    args = parser.parse_args()
    began = time.perf_counter()
    console = Console(width=160)
    for size in args.batch:
        # A send of one message takes ~100x less time: send more of them per chunk.
        chunk = args.chunk * max(1, 100 // size // 4)
        with tempfile.TemporaryDirectory(prefix="geogateway-bench-profile-") as tmp:
            profile = Path(tmp) / "emulator" if args.profile else None
            variants = asyncio.run(measure(args.rounds, args.cycles, chunk, size, profile))
            console.print(table(variants, args.rounds, size))
            if profile is not None:
                console.print(profile_table(Path(f"{profile}.0.prof"), size))
    console.print(f"wall time {time.perf_counter() - began:.0f} s; cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
