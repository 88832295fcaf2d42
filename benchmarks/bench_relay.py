"""Benchmark the relay client: its overhead over plain httpx, and its failover time.

    .venv/bin/python benchmarks/bench_relay.py [--requests 500] [--rounds 20]
        [--concurrency 1,16] [--trials 20]

One process runs the relay emulator (two namespaces, one hybrid connection), one
listener per namespace (the protocol over aiohttp WebSockets, answering each request
at once with a 1 KB body) and the senders, all on one event loop.

Overhead: ``--requests`` POSTs of 1 KB per run through ``AsyncGeoRelayClient``,
through a plain ``httpx.AsyncClient`` to the same URL with the same token header
(the reference), and through a second plain ``httpx.AsyncClient`` (an A/A control:
the same code as the reference, so its ratios show the noise of the measurement).
Each round runs the three once, in an order that cycles through all six, each run
after a ``gc.collect()``, and a warm-up precedes the rounds. The machine is shared,
so each run is compared with the reference run of its own round: the columns
"vs plain" are the medians over rounds of the paired ratios (run / reference) of
requests/s and of each run's p99, with the middle half of the rounds' p99 ratios
beside them; requests/s, p50 and p99 are medians over rounds. The target is relay
overhead <= 15% in both.

Failover: ``--trials`` times, four workers send GETs in a loop through a new
``AsyncGeoRelayClient`` (primary first) while ``geogateway namespace down primary``
is applied through the control file (as the CLI does; the emulator polls it every
0.1 s). Two figures: the latency of each request that began with the primary
active and was answered by the secondary (what failover costs a request), and the
gap from writing the control file to the first answer from the secondary (it
includes the emulator's poll). Target p99 <= 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import httpx
from rich.console import Console
from rich.table import Table

from gateway.emulator.relay._emulator import RelayEmulator
from gateway.relay import AsyncGeoRelayClient, RelayEndpoint, Request, Response
from gateway.relay.protocol import decode, encode
from gateway.transports.local._control import ControlFile, namespace_files

HC = "bench"
BODY = b"x" * 1024
OVERHEAD_TARGET = 0.15
FAILOVER_TARGET = 1.0


async def serve(ws: aiohttp.ClientWebSocketResponse[bool], name: str) -> None:
    """A listener: answers every inline request with the namespace's name and 1 KB."""
    answer = name.encode() + b":" + BODY
    async for msg in ws:
        request = decode(msg.data)
        if not isinstance(request, Request):
            continue
        if request.body:
            await ws.receive()
        await ws.send_str(encode(Response(request_id=request.id, body=True)))
        await ws.send_bytes(answer)


async def listen(session: aiohttp.ClientSession, ep: RelayEndpoint,
                 name: str) -> asyncio.Task[None]:
    ws = await session.ws_connect(ep.listen_url(token=ep.token()))
    return asyncio.create_task(serve(ws, name))


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


async def load(send: Callable[[], Awaitable[httpx.Response]], requests: int,
               concurrency: int) -> tuple[float, list[float]]:
    """Send ``requests`` with ``concurrency`` workers; requests/s and latencies."""
    left, latencies = [requests], []

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            start = time.perf_counter()
            response = await send()
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                raise RuntimeError(f"unexpected status {response.status_code}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return requests / (time.perf_counter() - start), latencies


@dataclass
class Series:
    rates: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)


KINDS = ("plain", "control", "relay")
#: Every order of the three runs of a round, so that none is always first or last.
ORDERS = list(itertools.permutations(KINDS))


async def overhead(emu: RelayEmulator,
                   args: argparse.Namespace) -> list[tuple[int, dict[str, Series]]]:
    primary, secondary = emu.endpoint("primary", HC), emu.endpoint("secondary", HC)
    url, token = primary.http_url(), primary.token()
    results = []
    async with httpx.AsyncClient() as plain, httpx.AsyncClient() as control, \
            AsyncGeoRelayClient(primary, secondary, randomize=False) as relay:
        senders = {
            "plain": lambda: plain.post(url, content=BODY,
                                        headers={"ServiceBusAuthorization": token}),
            "control": lambda: control.post(url, content=BODY,
                                            headers={"ServiceBusAuthorization": token}),
            "relay": lambda: relay.post(content=BODY),
        }
        for concurrency in args.concurrency:
            series = {kind: Series() for kind in KINDS}
            for send in senders.values():  # warm-up: connections, tokens, code paths
                await load(send, 200, concurrency)
            for round_ in range(args.rounds):
                for kind in ORDERS[round_ % len(ORDERS)]:
                    gc.collect()  # no run inherits the garbage of the one before
                    rate, latencies = await load(senders[kind], args.requests, concurrency)
                    series[kind].rates.append(rate)
                    series[kind].p50s.append(statistics.median(latencies))
                    series[kind].p99s.append(p99(latencies))
            results.append((concurrency, series))
    return results


async def wait_serving(ep: RelayEndpoint) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            with contextlib.suppress(httpx.TransportError):
                await client.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
                return
            await asyncio.sleep(0.05)
    raise RuntimeError("the primary did not come back up")


async def failover_trial(emu: RelayEmulator, control: ControlFile,
                         session: aiohttp.ClientSession) -> tuple[list[float], float, int]:
    primary, secondary = emu.endpoint("primary", HC), emu.endpoint("secondary", HC)
    control.update(down=False)
    await wait_serving(primary)
    listener = await listen(session, primary, "primary")
    failed_over: list[float] = []
    first_secondary: list[float] = []
    errors = [0]
    done, answered = asyncio.Event(), asyncio.Event()
    async with AsyncGeoRelayClient(primary, secondary, randomize=False) as relay:

        async def worker() -> None:
            while not done.is_set():
                was_primary = relay.roles.active == primary.namespace
                start = time.perf_counter()
                try:
                    response = await relay.get()
                except Exception:
                    errors[0] += 1
                    continue
                end = time.perf_counter()
                if response.content.startswith(b"secondary"):
                    first_secondary.append(end)
                    answered.set()
                    if was_primary:
                        failed_over.append(end - start)

        workers = [asyncio.create_task(worker()) for _ in range(4)]
        await asyncio.sleep(0.2)
        down_at = time.perf_counter()
        control.update(down=True)
        await asyncio.wait_for(answered.wait(), 10)
        await asyncio.sleep(0.1)
        done.set()
        await asyncio.gather(*workers)
    with contextlib.suppress(Exception):
        await listener
    return failed_over, min(first_secondary) - down_at, errors[0]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def ratios(run: list[float], reference: list[float]) -> list[float]:
    return [r / p for r, p in zip(run, reference, strict=True)]


def spread(values: list[float]) -> str:
    """The middle half of the rounds' ratios, as overheads."""
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return f"{low - 1:+.0%} .. {high - 1:+.0%}"


def report(rows: list[tuple[int, dict[str, Series]]], requests: list[float],
           gaps: list[float], errors: int, args: argparse.Namespace) -> None:
    console = Console(width=180)
    table = Table(title=f"relay client vs plain httpx, same emulator endpoint and listener "
                        f"({args.rounds} rounds x {args.requests} POSTs of 1 KB)")
    for column in ("client", "concurrency", "requests/s (median)", "p50", "p99",
                   "req/s vs plain", "p99 vs plain", "p99, middle half",
                   "target <= 15%"):
        table.add_column(column, justify="left" if column == "client" else "right")
    names = {"plain": "httpx.AsyncClient (reference)",
             "control": "2nd httpx.AsyncClient (A/A)",
             "relay": "AsyncGeoRelayClient"}
    for concurrency, series in rows:
        reference = series["plain"]
        for kind in KINDS:
            s = series[kind]
            cells = ("-", "-", "-", "-")
            if kind != "plain":
                rate_ratio = statistics.median(ratios(s.rates, reference.rates))
                tails = ratios(s.p99s, reference.p99s)
                tail_ratio = statistics.median(tails)
                verdict = "-"
                if kind == "relay":
                    ok = rate_ratio >= 1 - OVERHEAD_TARGET and tail_ratio <= 1 + OVERHEAD_TARGET
                    verdict = "PASS" if ok else "FAIL"
                cells = (f"{rate_ratio - 1:+.1%}", f"{tail_ratio - 1:+.1%}", spread(tails),
                         verdict)
            table.add_row(names[kind], str(concurrency), f"{statistics.median(s.rates):,.0f}",
                          ms(statistics.median(s.p50s)), ms(statistics.median(s.p99s)),
                          *cells)
    console.print(table)
    failover = Table(title=f"relay failover: primary namespace down mid-run "
                           f"({args.trials} trials, 4 workers sending GETs)")
    for column in ("figure", "n", "p50", "p99", "max", "target <= 1 s"):
        failover.add_column(column, justify="left" if column == "figure" else "right")
    for name, values in (("latency of a failed-over request", requests),
                         ("namespace down -> first answer from the secondary", gaps)):
        tail = p99(values)
        failover.add_row(name, str(len(values)), ms(statistics.median(values)), ms(tail),
                         ms(max(values)), "PASS" if tail <= FAILOVER_TARGET else "FAIL")
    console.print(failover)
    console.print(f"requests that raised during the failover trials: {errors}")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        async with RelayEmulator({"primary": 0, "secondary": 0}, [HC],
                                 data_dir=data_dir) as emu, aiohttp.ClientSession() as session:
            tasks = [await listen(session, emu.endpoint(ns, HC), ns)
                     for ns in ("primary", "secondary")]
            rows = await overhead(emu, args)
            tasks[0].cancel()
            control = ControlFile(namespace_files("primary", data_dir)[1])
            # The primary's listener is replaced in each trial: close this one first.
            control.update(down=True)
            await asyncio.sleep(0.3)
            requests: list[float] = []
            gaps: list[float] = []
            errors = 0
            for _ in range(args.trials):
                failed_over, gap, failed = await failover_trial(emu, control, session)
                requests += failed_over
                gaps.append(gap)
                errors += failed
            tasks[1].cancel()
    report(rows, requests, gaps, errors, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--concurrency", default="1,16",
                        type=lambda text: [int(c) for c in text.split(",")])
    parser.add_argument("--trials", type=int, default=20)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
