"""Rebalancing across real processes sharing one SQLite checkpoint store: one member
stopped gracefully (SIGTERM), then one killed (SIGKILL); idle survivors are woken
through the file, and each partition the lost member held moves exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gateway.consumer._sqlite_store import SqliteCheckpointStore

from .conftest import GROUP

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 16
NAMES = ("a", "b", "c", "d", "e")
# Fast enough for a test, slow enough that a busy machine does not look like a crash.
SETTINGS = {"interval": 0.25, "idle_interval": 1.0, "heartbeat_interval": 1.0,
            "heartbeat_expiry": 4.0, "fence_margin": 0.5, "settle_cycles": 2}

_MEMBER = textwrap.dedent("""
    import asyncio, json, signal, sys
    from gateway.consumer import (BalanceSettings, ConsumerGroupRef, OwnershipManager,
                                  SqliteCheckpointStore)

    path, name = sys.argv[1], sys.argv[2]
    group = ConsumerGroupRef(**json.loads(sys.argv[3]))
    settings = BalanceSettings(**json.loads(sys.argv[4]))
    pids = [str(p) for p in range(int(sys.argv[5]))]

    def say(kind, pid=""):
        print(json.dumps([name, kind, pid]), flush=True)

    def hook(kind):
        async def said(pid):
            say(kind, pid)
        return said

    async def main():
        async with SqliteCheckpointStore(path) as store:
            m = OwnershipManager(store, group, pids, instance_id=name, settings=settings,
                                 on_claimed=hook("claimed"), on_released=hook("released"),
                                 on_lost=hook("lost"))
            task = asyncio.create_task(m.run())
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            idle = None
            while not stop.is_set():
                if m.idle != idle:
                    idle = m.idle
                    say("idle" if idle else "busy")
                try:
                    await asyncio.wait_for(stop.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await m.stop()
            say("stopped")

    asyncio.run(main())
""")


class Members:
    """The member processes and what they said, in order."""

    def __init__(self, path: Path) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        self.logs = {name: path.with_name(f"{name}.log") for name in NAMES}
        self.procs = {}
        for name in NAMES:
            with self.logs[name].open("w") as log:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-c", _MEMBER, str(path), name, json.dumps(vars(GROUP)),
                     json.dumps(SETTINGS), str(PARTITIONS)],
                    cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
        self.readers = [threading.Thread(target=self._read, args=(proc,), daemon=True)
                        for proc in self.procs.values()]
        for reader in self.readers:
            reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.lock:
                self.events.append(tuple(json.loads(line)))  # type: ignore[arg-type]

    def since(self, mark: int) -> list[tuple[str, str, str]]:
        with self.lock:
            return list(self.events[mark:])

    def held(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {name: set() for name in NAMES}
        for name, kind, pid in self.since(0):
            if kind == "claimed":
                out[name].add(pid)
            elif kind in ("released", "lost"):
                out[name].discard(pid)
        return out

    def idle(self, names: tuple[str, ...]) -> bool:
        state = {name: kind for name, kind, _ in self.since(0) if kind in ("idle", "busy")}
        return all(state.get(name) == "idle" for name in names)

    def balanced(self, names: tuple[str, ...]) -> bool:
        held = self.held()
        counts = [len(held[x]) for x in names]
        every = sorted(p for x in names for p in held[x])
        return every == sorted(str(p) for p in range(PARTITIONS)) and max(counts) - min(counts) <= 1

    def stderr(self, name: str) -> str:
        return self.logs[name].read_text()

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for reader in self.readers:
            reader.join(timeout=30)
        for proc in self.procs.values():
            assert proc.stdout is not None
            proc.stdout.close()


def until(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {within} s"
        time.sleep(0.05)


def test_each_partition_of_a_stopped_or_killed_member_moves_once_across_processes(tmp_path):
    path = tmp_path / "checkpoints.db"
    SqliteCheckpointStore(path)  # create it, so that no two members race to
    members = Members(path)
    try:
        # Given five idle members balanced over one store file
        until(lambda: members.balanced(NAMES) and members.idle(NAMES), 60, "balanced")
        # When "c" stops gracefully (SIGTERM: its stop() hands over)
        stay = tuple(x for x in NAMES if x != "c")
        theirs, mark = members.held()["c"], len(members.since(0))
        members.procs["c"].send_signal(signal.SIGTERM)
        assert members.procs["c"].wait(timeout=60) == 0, members.stderr("c")
        until(lambda: members.balanced(stay) and members.idle(stay), 60, "rebalanced")
        # Then each of its partitions was claimed once by a survivor, and only "c"
        # handed any over
        after = members.since(mark)
        assert sorted(p for _, k, p in after if k == "claimed") == sorted(theirs)
        assert {x for x, k, _ in after if k in ("released", "lost")} == {"c"}
        # When "e", idle, is killed (no hand-over, no leave marker)
        alive = tuple(x for x in stay if x != "e")
        theirs, mark = members.held()["e"], len(members.since(0))
        members.procs["e"].kill()
        members.procs["e"].wait(timeout=30)
        until(lambda: members.balanced(alive) and members.idle(alive), 60, "rebalanced")
        # Then its partitions, each once, and nobody else's moved
        after = members.since(mark)
        assert sorted(p for _, k, p in after if k == "claimed") == sorted(theirs)
        assert [e for e in after if e[1] in ("released", "lost")] == []
    finally:
        members.close()
