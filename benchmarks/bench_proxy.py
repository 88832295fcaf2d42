"""Benchmark the proxy: the same azure-servicebus client straight to ``geogateway
emulator`` and through ``geogateway proxy`` in front of two emulated namespaces.

    .venv/bin/python benchmarks/bench_proxy.py [--messages 2000] [--batch 100] [--singles 200]
        [--trials 10]

Starts ``geogateway emulator`` (a child process; namespaces ``primary`` and
``secondary``, queue ``bench``) and ``geogateway proxy`` (a child process, passive,
its configuration naming the two emulated namespaces), then, one run each, with one
``ServiceBusClient``:

* batched sends (``--batch`` messages of 1 KiB per ``send_messages``): msgs/s;
* single sends: p50 latency;
* receive + complete (peek-lock, ``max_message_count=100``): msgs/s;
* failover through the proxy: the primary down (``LocalNamespace.down``), then hung
  (``hang``): the first single send after the fault, p99 over ``--trials``, each
  trial with a fresh proxy (so that it starts on the primary) warmed up by 50 sends;
* the proxy's CPU time (user + system, ``/proc/PID/stat``) per message sent and received.

Targets: batched sends and receives >= 0.7x direct, single-send p50 <= 1.5x, failover p99
<= 0.5 s (down) and <= 1 s (hung).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from gateway.emulator._process import EmulatorProcess
from gateway.transports import LocalNamespace

QUEUE = "bench"
BODY = "x" * 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def batched(conn: str, messages: int, batch: int) -> float:
    async with ServiceBusClient.from_connection_string(conn) as c, \
            c.get_queue_sender(QUEUE) as sender:
        await sender.send_messages([ServiceBusMessage(BODY) for _ in range(batch)])  # warm
        start = time.perf_counter()
        for _ in range(messages // batch):
            await sender.send_messages([ServiceBusMessage(BODY) for _ in range(batch)])
        return (messages // batch) * batch / (time.perf_counter() - start)


async def singles(conn: str, count: int) -> float:
    times = []
    async with ServiceBusClient.from_connection_string(conn) as c, \
            c.get_queue_sender(QUEUE) as sender:
        await sender.send_messages(ServiceBusMessage(BODY))
        for _ in range(count):
            start = time.perf_counter()
            await sender.send_messages(ServiceBusMessage(BODY))
            times.append(time.perf_counter() - start)
    return statistics.median(times)


async def receive(conn: str) -> tuple[float, int]:
    got = 0
    async with ServiceBusClient.from_connection_string(conn) as c, \
            c.get_queue_receiver(QUEUE, prefetch_count=100) as receiver:
        start = time.perf_counter()
        while batch := await receiver.receive_messages(max_message_count=100, max_wait_time=1):
            for m in batch:
                await receiver.complete_message(m)
            got += len(batch)
        return got / max(time.perf_counter() - start - 1, 1e-9), got


async def failover(emu: EmulatorProcess, root: Path, data_dir: Path, fault: str,
                   trials: int) -> float:
    """p99 of the first send after the fault, each trial with a fresh proxy and role
    state (so that each starts on the primary)."""
    primary = LocalNamespace("primary", data_dir=data_dir)
    times = []
    for trial in range(trials):
        here = root / f"{fault}-{trial}"
        proxy, conn = await start_proxy(write_config(emu, here), here)
        try:
            async with ServiceBusClient.from_connection_string(conn) as c, \
                    c.get_queue_sender(QUEUE) as sender:
                # Warm up: the send deadline learns the primary's latency (until it has
                # some, a send waits up to the 2 s initial deadline, as bench_hang.py's).
                for _ in range(50):
                    await sender.send_messages(ServiceBusMessage(BODY))
                primary.down() if fault == "down" else primary.hang()
                await asyncio.sleep(0.2)  # the emulator reads its control file every 0.1 s
                start = time.perf_counter()
                await sender.send_messages(ServiceBusMessage(BODY))
                times.append(time.perf_counter() - start)
        finally:
            primary.up()
            proxy.terminate()
            await proxy.wait()
    times.sort()
    return times[min(len(times) - 1, int(0.99 * len(times)))]


def write_config(emu: EmulatorProcess, root: Path) -> Path:
    """A passive configuration of the two emulated namespaces, role state in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "gateway.toml"
    config.write_text(f'primary = "{emu.connection_string("primary")}"\n'
                      f'secondary = "{emu.connection_string("secondary")}"\n'
                      f'entity = "{QUEUE}"\nstate_dir = "{root / "state"}"\n')
    return config


async def start_proxy(config: Path, data_dir: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "proxy", "--config", str(config), "--json",
        "--data-dir", str(data_dir), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    ready = json.loads(await proc.stdout.readline())
    return proc, ready["connection_string"]


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "data"
        async with EmulatorProcess(["primary", "secondary"], data_dir=data,
                                   queues=[QUEUE]) as emu:
            proxy, via = await start_proxy(write_config(emu, root / "main"), root / "main")
            try:
                direct = emu.connection_string("primary")
                rows = []
                d_batch = await batched(direct, args.messages, args.batch)
                d_recv, _ = await receive(direct)
                cpu0 = cpu_seconds(proxy.pid)
                p_batch = await batched(via, args.messages, args.batch)
                p_recv, received = await receive(via)
                cpu = cpu_seconds(proxy.pid) - cpu0
                d_single = await singles(direct, args.singles)
                p_single = await singles(via, args.singles)
                await receive(via)
                down = await failover(emu, root, data, "down", args.trials)
                hung = await failover(emu, root, data, "hang", args.trials)
                per_msg = cpu / (args.messages + received) * 1e6
                rows = [
                    ("batched sends msgs/s", f"{d_batch:,.0f}", f"{p_batch:,.0f}",
                     f"{p_batch / d_batch:.2f}x", p_batch / d_batch >= 0.7, ">= 0.7x"),
                    ("single send p50 ms", f"{d_single * 1e3:.2f}", f"{p_single * 1e3:.2f}",
                     f"{p_single / d_single:.2f}x", p_single / d_single <= 1.5, "<= 1.5x"),
                    ("receive+complete msgs/s", f"{d_recv:,.0f}", f"{p_recv:,.0f}",
                     f"{p_recv / d_recv:.2f}x", p_recv / d_recv >= 0.7, ">= 0.7x"),
                    ("failover p99, primary down", "-", f"{down * 1e3:.0f} ms", "-",
                     down <= 0.5, "<= 0.5 s"),
                    ("failover p99, primary hung", "-", f"{hung * 1e3:.0f} ms", "-",
                     hung <= 1.0, "<= 1 s"),
                    ("proxy CPU per message", "-", f"{per_msg:.0f} us", "-", None, "figure"),
                ]
            finally:
                proxy.terminate()
                await proxy.wait()
    print("| measure | direct | through proxy | ratio | target | result |")
    print("|---|---|---|---|---|---|")
    for name, d, p, ratio, ok, target in rows:
        verdict = "figure" if ok is None else ("PASS" if ok else "MISS")
        print(f"| {name} | {d} | {p} | {ratio} | {target} | {verdict} |")
    return 0 if all(r[4] is not False for r in rows) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--trials", type=int, default=10)
    sys.exit(asyncio.run(main(parser.parse_args())))
