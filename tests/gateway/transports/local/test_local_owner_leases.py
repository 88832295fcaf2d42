"""Owner levels of the local namespace are held by open readers only, as on Event Hubs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from gateway.transports import EventPosition, LocalNamespace, LocalTransport
from gateway.transports.local._db import Database
from gateway.transports.local._events import LEASE, check_owner, claim_owner
from replication import OwnershipLost

pytestmark = pytest.mark.anyio

START = EventPosition.earliest()
#: What the partition processor used as owner levels before: milliseconds since 1970.
HIGH = 1_764_000_000_000


@pytest.fixture
def hub(namespace: LocalNamespace) -> str:
    namespace.create_partitioned("hub", partitions=2)
    return "hub"


async def test_a_closed_reader_no_longer_fences(hub: str, tmp_path: Path) -> None:
    # Given a reader with a high owner level that read, then closed
    async with LocalTransport("primary", data_dir=tmp_path) as first:
        await first.read_partition(hub, "0", position=START, owner_level=HIGH)
    # When a reader with a lower level (or a reader without one) opens
    async with LocalTransport("primary", data_dir=tmp_path) as later:
        # Then it reads, and it fences in turn
        assert await later.read_partition(hub, "0", position=START, owner_level=0) == []
        async with LocalTransport("primary", data_dir=tmp_path) as lower:
            with pytest.raises(OwnershipLost, match="owner level 0"):
                await lower.read_partition(hub, "0", position=START, owner_level=-1)


async def test_an_open_reader_still_fences_and_an_equal_level_takes_over(
        hub: str, tmp_path: Path) -> None:
    async with LocalTransport("primary", data_dir=tmp_path) as a, \
            LocalTransport("primary", data_dir=tmp_path) as b:
        await a.read_partition(hub, "1", position=START, owner_level=7)
        # A lower level is refused while the first reader is open
        with pytest.raises(OwnershipLost, match="higher than this reader's 6"):
            await b.read_partition(hub, "1", position=START, owner_level=6)
        # An equal level takes the partition over (the newer reader wins, as on Event
        # Hubs), and the old reader's next read says so
        await b.read_partition(hub, "1", position=START, owner_level=7)
        with pytest.raises(OwnershipLost, match="taken over by a reader with owner level 7"):
            await a.read_partition(hub, "1", position=START, owner_level=7)
        await b.read_partition(hub, "1", position=START, owner_level=7)


_HOLDER = textwrap.dedent("""
    import asyncio, sys
    from gateway.transports import EventPosition, LocalTransport

    async def main() -> None:
        async with LocalTransport("primary", data_dir=sys.argv[1]) as t:
            await t.read_partition("hub", "0", position=EventPosition.earliest(),
                                   owner_level=int(sys.argv[2]))
            print("reading", flush=True)
            await asyncio.sleep(120)

    asyncio.run(main())
""")


def read_once(data_dir: Path, level: int) -> list[object]:
    async def go() -> list[object]:
        async with LocalTransport("primary", data_dir=data_dir) as t:
            return list(await t.read_partition("hub", "0", position=START, owner_level=level))
    return anyio.run(go)


@pytest.mark.usefixtures("hub")
def test_a_killed_readers_level_is_released(tmp_path: Path) -> None:
    # Given another process reading with a high owner level
    with subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), str(HIGH)],
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "reading"
            # While it runs, a lower level is refused
            with pytest.raises(OwnershipLost, match=f"owner level {HIGH}"):
                read_once(tmp_path, 1)
            # When it is killed (and not yet reaped by its parent)
            os.kill(proc.pid, signal.SIGKILL)
            while _state(proc.pid) not in ("Z", "X", None):
                time.sleep(0.01)
            # Then its level no longer fences, at once
            assert read_once(tmp_path, 1) == []
        finally:
            proc.kill()


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return None




def test_a_lease_ends_after_a_while_without_reads(tmp_path: Path) -> None:
    # Given a lease taken at t=100 by a live process (this one)
    db = Database(str(tmp_path / "ns.db"), namespace="primary")
    key = ("hub", "$Default", 0)

    def at(now: float, level: int, reader: str, claim: bool) -> None:
        db.write(lambda conn: claim_owner(conn, key, level=level, reader=reader, claim=claim,
                                          now=now))

    at(100.0, 5, "a", True)
    # Lower levels are refused while it runs, and reads renew it half-way
    with pytest.raises(OwnershipLost):
        at(100.0 + LEASE - 1, 1, "b", True)
    assert db.read(lambda conn: check_owner(conn, key, level=5, reader="a", claim=False,
                                            now=100.0 + LEASE / 4))
    assert not db.read(lambda conn: check_owner(conn, key, level=5, reader="a", claim=False,
                                                now=100.0 + LEASE * 3 / 4))
    # When no read renews it for LEASE seconds, another reader takes it
    at(100.0 + LEASE + 1, 1, "b", True)
    # and the first one, reading again, learns that it lost the partition
    with pytest.raises(OwnershipLost, match="taken over"):
        at(100.0 + LEASE + 2, 5, "a", False)
    db.close()
