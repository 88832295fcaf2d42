"""Benchmark the geo session receiver against the SDK's own session receiver.

    .venv/bin/python benchmarks/bench_sessions.py [--rounds 5] [--sessions 4]
        [--messages 250] [--batch 50] [--prefetch 0]

Starts ``geogateway emulator`` (a child process; namespaces ``primary`` and
``secondary``, a session-enabled queue per variant) and, in the same run and
the same event loop, drains ``--sessions`` sessions of ``--messages`` messages of
1 KiB each through:

* SDK: azure-servicebus on the primary, as an application would read sessions: a
  session receiver on the next available session (``NEXT_AVAILABLE_SESSION``),
  ``receive_messages(max_message_count=batch)`` and ``complete_message`` of each
  until a receive waits 0.3 s for nothing, then the next session;
* geo: ``AsyncGeoSessionReceiver`` over both namespaces (``ServiceBusTransport``,
  a ``SqliteDedupStore``, its positions file), ``run(handler)`` with a coroutine
  handler that does nothing and ``session_idle_timeout=0.3``: each session's
  messages in the sender's order, de-duplicated, the secondary's lock held too (one
  dedup store and one state directory per variant for the whole run, as an
  application keeps them);
* geo, two copies (context): the same with every message in both namespaces, as
  active sends leave them (each id handed over once, the other copy completed).

Both read with the same SDK settings: ``--prefetch`` is the SDK receivers'
``prefetch_count`` (0, the SDK's default, or e.g. the batch), given to the geo
receiver's ``ServiceBusTransport``\ s too.

Each variant first drains one session of 10 messages, untimed (a warm-up: the
emulator's files, the first connections, the stores). Before each variant's timed
drain its queue is filled with fresh messages (untimed,
straight into the namespace files, stamped with their positions as a geo sender
stamps them), all of a session's messages in the primary (and the secondary for two
copies). A drain is timed from its start to the last message handled. The variants
run in a rotated order each round; the table shows the median messages/s over
``--rounds`` rounds and the median of the per-round ratios (geo rate / SDK rate in the
same round). Target: the geo session receiver at >= 0.7x the SDK's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from azure.servicebus import NEXT_AVAILABLE_SESSION
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import OperationTimeoutError
from rich.console import Console
from rich.table import Table

from gateway.emulator._process import EmulatorProcess
from gateway.geo.sessions._receiver import AsyncGeoSessionReceiver
from gateway.transports.base import ReceivedMessage
from gateway.transports.local import LocalTransport
from gateway.transports.servicebus import ServiceBusTransport
from replication import SESSION_POSITION, Message

QUEUE = "bench-sessions"  # a queue per variant: QUEUE-sdk, QUEUE-geo, QUEUE-geo-2
BODY = b"x" * 1024
TARGET = 0.7
IDLE = 0.3  # seconds without messages that end a session, for both
NAMES = ("primary", "secondary")


async def fill(data_dir: Path, queue: str, sessions: int, messages: int, copies: int) -> int:
    """Put fresh, stamped messages into the queue; the count put in (one copy)."""
    run = uuid.uuid4().hex[:8]
    batch = [Message(BODY, message_id=f"{run}-{s}-{p}", session_id=f"{run}-s{s}",
                     properties={SESSION_POSITION: p})
             for s in range(sessions) for p in range(messages)]
    for name in NAMES[:copies]:
        async with LocalTransport(name, data_dir=data_dir) as t:
            for i in range(0, len(batch), 200):
                await t.send(queue, batch[i:i + 200])
    return len(batch)


async def drain_sdk(conn_str: str, queue: str, total: int, batch: int, prefetch: int) -> float:
    done = 0
    started = time.perf_counter()
    async with ServiceBusClient.from_connection_string(conn_str, retry_total=0) as client:
        while done < total:
            try:
                receiver = client.get_queue_receiver(
                    queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5,
                    prefetch_count=prefetch)
                await receiver.__aenter__()
            except OperationTimeoutError:
                continue
            async with receiver:
                while True:
                    got = await receiver.receive_messages(max_message_count=batch,
                                                          max_wait_time=IDLE)
                    if not got:
                        break
                    for m in got:
                        await receiver.complete_message(m)
                    done += len(got)
    return time.perf_counter() - started


async def drain_geo(emulator: EmulatorProcess, queue: str, root: Path, total: int,
                    batch: int, prefetch: int) -> float:
    os.makedirs(root, exist_ok=True)
    primary, secondary = (ServiceBusTransport.from_connection_string(
        emulator.connection_string(n), name=n, prefetch_count=prefetch) for n in NAMES)
    receiver = AsyncGeoSessionReceiver(
        primary=primary, secondary=secondary, entity=queue, dedup_store=root / "dedup.db",
        state_dir=root / "state", prefetch=batch, poll_wait=0.1)
    handled = 0
    finished = asyncio.Event()
    ended = 0.0

    async def handler(_: ReceivedMessage) -> None:
        nonlocal handled, ended
        handled += 1
        if handled == total:
            ended = time.perf_counter()
            finished.set()

    started = time.perf_counter()
    task = asyncio.create_task(receiver.run(handler, stop=finished, session_idle_timeout=IDLE))
    await finished.wait()
    await task
    await receiver.aclose()
    await primary.aclose()
    await secondary.aclose()
    return ended - started


async def main(rounds: int, sessions: int, messages: int, batch: int, prefetch: int) -> None:
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data_dir = root / "namespaces"
        variants = ["sdk", "geo", "geo-2"]
        queues = {v: f"{QUEUE}-{v}" for v in variants}
        async with EmulatorProcess(NAMES, data_dir=data_dir, queues={
                q: {"requires_session": True, "lock_duration": 30.0}
                for q in queues.values()}) as emulator:
            conn = emulator.connection_string("primary")
            rates: dict[str, list[float]] = {v: [] for v in variants}
            ratios: dict[str, list[float]] = {v: [] for v in variants[1:]}
            # Warm-up, untimed: the emulator's files, the first connections, the stores.
            for v in variants:
                q, copies = queues[v], 2 if v == "geo-2" else 1
                total = await fill(data_dir, q, 1, 10, copies)
                if v == "sdk":
                    await drain_sdk(conn, q, total, batch, prefetch)
                else:
                    await drain_geo(emulator, q, root / v, total, batch, prefetch)
            for r in range(rounds):
                order = variants[r % 3:] + variants[:r % 3]
                seconds: dict[str, float] = {}
                for v in order:
                    copies = 2 if v == "geo-2" else 1
                    total = await fill(data_dir, queues[v], sessions, messages, copies)
                    if v == "sdk":
                        seconds[v] = await drain_sdk(conn, queues[v], total, batch, prefetch)
                    else:
                        seconds[v] = await drain_geo(emulator, queues[v], root / v, total,
                                                     batch, prefetch)
                    rates[v].append(total / seconds[v])
                for v in variants[1:]:
                    ratios[v].append(seconds["sdk"] / seconds[v])
                console.print(f"round {r + 1}: " + ", ".join(
                    f"{v} {rates[v][-1]:.0f} msg/s" for v in variants))
    table = Table(title=f"session receivers over Service Bus (emulator): {sessions} sessions x "
                        f"{messages} messages of 1 KiB, batch {batch}, prefetch {prefetch}, "
                        f"{rounds} rounds")
    for column in ("receiver", "msg/s (median)", "vs SDK (median)", f"target >= {TARGET}x"):
        table.add_column(column)
    table.add_row("SDK session receiver (primary)", f"{statistics.median(rates['sdk']):.0f}",
                  "1.00x", "")
    for v, label in (("geo", "AsyncGeoSessionReceiver (one copy)"),
                     ("geo-2", "AsyncGeoSessionReceiver (two copies, context)")):
        ratio = statistics.median(ratios[v])
        verdict = ("met" if ratio >= TARGET else "MISSED") if v == "geo" else "-"
        table.add_row(label, f"{statistics.median(rates[v]):.0f}", f"{ratio:.2f}x", verdict)
    console.print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=250)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--prefetch", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.sessions, args.messages, args.batch, args.prefetch))
