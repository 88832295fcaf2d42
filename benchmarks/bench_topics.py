"""Benchmark topic fan-out: a topic with 1, 2 and 10 subscriptions against a queue.

    .venv/bin/python benchmarks/bench_topics.py [--messages 2000] [--rounds 3]
        [--stores local emulator]

For each store (``local``: ``LocalTransport`` on an embedded namespace in this process;
``emulator``: the unmodified azure-servicebus SDK against ``geogateway emulator`` in a
child process), in the same run and the same event loop, each variant sends
``--messages`` messages of 1 KiB in batches of 100, then receives them all
(receive-and-delete, batches of up to 100):

* queue: to a queue, received from it (the reference);
* topic, N subscriptions (N = 1, 2, 10, each with the default true rule): to a topic,
  received from every subscription at once, one receiver per subscription;
* topic, 10 subscriptions with SQL rules: each selects a tenth of the messages
  (``n % 10 = k``), so the topic delivers as many copies as a queue holds messages.

A round runs every variant once, in a rotated order; the table shows medians over
``--rounds`` rounds: messages/s into the entity (sending only), messages/s per
subscription (``--messages`` over the time to send and drain them all; SQL rules: a
subscription's tenth), copies/s (every subscription's messages over that time), and
per subscription against the queue of the same round (its messages/s per
subscription / the queue's messages/s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from rich.console import Console
from rich.table import Table

from gateway.emulator._process import EmulatorProcess
from gateway.transports import LocalNamespace, LocalTransport, ReceiveMode, Rule, SqlFilter
from replication import Message

NAMESPACE = "bench"
BODY = 1024
BATCH = 100
QUEUE = "bench-queue"
FANOUTS = (1, 2, 10)
SQL = "bench-sql"


@dataclass(frozen=True)
class Variant:
    name: str
    entity: str
    subscriptions: tuple[str, ...]  # empty: the queue itself
    share: int = 1  # each subscription takes 1 / share of the messages


VARIANTS = [Variant("queue", QUEUE, ())] + [
    Variant(f"topic, {n} subscription{'s' if n > 1 else ''}", f"bench-topic-{n}",
            tuple(f"s{i}" for i in range(n))) for n in FANOUTS] + [
    Variant("topic, 10 subscriptions, SQL rules (a tenth each)", SQL,
            tuple(f"s{i}" for i in range(10)), share=10)]


@dataclass
class Result:
    send: list[float] = field(default_factory=list)  # seconds to send
    total: list[float] = field(default_factory=list)  # seconds to send and drain
    ratio: list[float] = field(default_factory=list)  # per subscription / queue, per round


def declare(data_dir: Path) -> None:
    with LocalNamespace(NAMESPACE, data_dir=data_dir) as ns:
        ns.create_queue(QUEUE)
        for v in VARIANTS[1:]:
            ns.create_topic(v.entity)
            for i, sub in enumerate(v.subscriptions):
                tenth = Rule(name="tenth", filter=SqlFilter(f"n % 10 = {i}"))
                rules = [tenth] if v.share > 1 else []
                ns.create_subscription(v.entity, sub, rules=rules)


def sources(v: Variant) -> list[str]:
    return [f"{v.entity}/Subscriptions/{s}" for s in v.subscriptions] or [v.entity]


def messages(count: int) -> list[Message]:
    return [Message(b"x" * BODY, message_id=f"m{i}", properties={"n": i}) for i in range(count)]


# -- the two stores -----------------------------------------------------------------------

Sender = Callable[[Variant, list[Message]], Awaitable[None]]
Drainer = Callable[[str, int], Awaitable[None]]


async def local_store(data_dir: Path) -> tuple[Sender, Drainer, Callable[[], Awaitable[None]]]:
    sender = LocalTransport(NAMESPACE, data_dir=data_dir)
    readers: dict[str, LocalTransport] = {}

    async def send(v: Variant, batch: list[Message]) -> None:
        await sender.send(v.entity, batch)

    async def drain(source: str, count: int) -> None:
        reader = readers.setdefault(source, LocalTransport(NAMESPACE, data_dir=data_dir))
        got = 0
        while got < count:
            got += len(await reader.receive(source, max_messages=BATCH, max_wait=1.0,
                                            mode=ReceiveMode.RECEIVE_AND_DELETE))

    async def close() -> None:
        for t in (sender, *readers.values()):
            await t.aclose()
    return send, drain, close


async def emulator_store(conn: str) -> tuple[Sender, Drainer, Callable[[], Awaitable[None]]]:
    client = ServiceBusClient.from_connection_string(conn, retry_total=0)
    senders = {v.entity: client.get_topic_sender(v.entity) if v.subscriptions
               else client.get_queue_sender(v.entity) for v in VARIANTS}
    for s in senders.values():
        await s.__aenter__()

    async def send(v: Variant, batch: list[Message]) -> None:
        sdk = senders[v.entity]
        out = await sdk.create_message_batch()
        for m in batch:
            out.add_message(ServiceBusMessage(m.body, message_id=m.message_id,
                                              application_properties=dict(m.properties)))
        await sdk.send_messages(out)

    receivers: dict[str, ServiceBusReceiver] = {}

    async def drain(source: str, count: int) -> None:
        receiver = receivers.get(source)
        if receiver is None:  # opened once, kept: opening and closing is not fan-out
            topic, _, sub = source.partition("/Subscriptions/")
            kwargs: dict[str, Any] = {
                "receive_mode": ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                "prefetch_count": BATCH}
            receiver = receivers[source] = (
                client.get_subscription_receiver(topic, sub, **kwargs) if sub
                else client.get_queue_receiver(topic, **kwargs))
            await receiver.__aenter__()
        got = 0
        while got < count:
            got += len(await receiver.receive_messages(max_message_count=BATCH,
                                                       max_wait_time=1.0))

    async def close() -> None:
        for handler in (*senders.values(), *receivers.values()):
            await handler.close()
        await client.close()
    return send, drain, close


async def one(v: Variant, msgs: list[Message], send: Sender, drain: Drainer) -> tuple[float, float]:
    started = time.perf_counter()
    for i in range(0, len(msgs), BATCH):
        await send(v, msgs[i:i + BATCH])
    sent = time.perf_counter()
    each = len(msgs) // v.share
    await asyncio.gather(*(drain(s, each) for s in sources(v)))
    return sent - started, time.perf_counter() - started


async def bench(store: str, count: int, rounds: int) -> dict[str, Result]:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        declare(data_dir)
        if store == "local":
            emulator = None
            send, drain, close = await local_store(data_dir)
        else:
            emulator = EmulatorProcess((NAMESPACE,), data_dir=data_dir, log=data_dir / "emu.log")
            await emulator.start()
            send, drain, close = await emulator_store(emulator.connection_string(NAMESPACE))
        try:
            results = {v.name: Result() for v in VARIANTS}
            warm = messages(BATCH * 2)
            for v in VARIANTS:  # connections, links, caches
                await one(v, warm, send, drain)
            msgs = messages(count)
            for r in range(rounds):
                order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
                times = {v.name: await one(v, msgs, send, drain) for v in order}
                queue_rate = count / times["queue"][1]
                for v in VARIANTS:
                    send_s, total = times[v.name]
                    results[v.name].send.append(send_s)
                    results[v.name].total.append(total)
                    results[v.name].ratio.append(count / v.share / total / queue_rate)
            return results
        finally:
            await close()
            if emulator is not None:
                await emulator.stop()


def show(store: str, count: int, rounds: int, results: dict[str, Result]) -> None:
    label = "local namespace (LocalTransport)" if store == "local" else \
        "emulator (azure-servicebus SDK)"
    table = Table(title=f"topic fan-out, {label}: {count} x {BODY} B, batches of {BATCH}, "
                        f"median of {rounds} rounds")
    for column in ("variant", "sent msg/s", "per subscription msg/s", "copies/s",
                   "per subscription vs queue"):
        table.add_column(column)
    for v in VARIANTS:
        r = results[v.name]
        total = statistics.median(r.total)
        per = count / v.share / total
        copies = per * max(1, len(v.subscriptions))
        table.add_row(v.name, f"{count / statistics.median(r.send):,.0f}", f"{per:,.0f}",
                      f"{copies:,.0f}", "(reference)" if v.name == "queue"
                      else f"{statistics.median(r.ratio):.2f}x")
    Console(width=120).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", nargs="+", choices=("local", "emulator"),
                        default=["local", "emulator"])
    args = parser.parse_args()
    started = time.monotonic()
    for store in args.stores:
        results = asyncio.run(bench(store, args.messages, args.rounds))
        show(store, args.messages, args.rounds, results)
    print(f"wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
