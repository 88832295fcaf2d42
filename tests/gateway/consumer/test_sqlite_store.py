"""SqliteCheckpointStore: the CheckpointStore contract (run against the in-memory
twin and the PostgreSQL store too, so they cannot drift), many processes on one
file, the file itself, and the Azure SDK's dict interface as EventHubConsumerClient
drives it."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from gateway.consumer import (
    Checkpoint,
    CheckpointStore,
    ConsumerGroupRef,
    Heartbeat,
    InMemoryCheckpointStore,
    Ownership,
)
from gateway.consumer._sqlite_store import SqliteCheckpointStore
from replication import ConfigError, GatewayError, OwnershipLost
from tests.conftest import FakeClock

from ._damage import damage_table_root, sha256
from .conftest import GROUP

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
OTHER = replace(GROUP, consumer_group="audit")


def claim(partition: str, owner: str, etag: str | None = None,
          group: ConsumerGroupRef = GROUP) -> Ownership:
    return Ownership(**vars(group), partition_id=partition, owner_id=owner, etag=etag)


def checkpoint(partition: str, sequence: int, group: ConsumerGroupRef = GROUP) -> Checkpoint:
    return Checkpoint(**vars(group), partition_id=partition, offset=str(sequence * 100),
                      sequence_number=sequence)


@pytest.fixture(params=["sqlite", "memory", "postgres"])
async def store(request, tmp_path: Path, clock: FakeClock) -> AsyncIterator[CheckpointStore]:
    made: CheckpointStore
    if request.param == "sqlite":
        made = SqliteCheckpointStore(tmp_path / "checkpoints.db", clock=clock)
    elif request.param == "postgres":
        from gateway.consumer import PostgresCheckpointStore

        pg = request.getfixturevalue("pg")
        made = PostgresCheckpointStore(pg.dsn, schema=pg.schema, clock=clock)
    else:
        made = InMemoryCheckpointStore(clock=clock)
    async with made:
        yield made


# -- the contract, on both stores ------------------------------------------------------


async def test_a_new_claim_wins_with_an_etag_and_the_clock_time(store, clock):
    # Given no ownership yet
    # When instance a claims partition 0
    won = await store.claim_ownership([claim("0", "a")])
    # Then it wins, with an etag and the store's time, and the record is listed
    assert [(o.partition_id, o.owner_id, o.last_modified_time) for o in won] == [
        ("0", "a", clock.now)]
    assert won[0].etag
    assert await store.list_ownership(GROUP) == won


async def test_a_claim_with_a_stale_etag_loses_and_the_current_etag_wins(store, clock):
    # Given a owns partition 0, and b read it; then a renewed its claim
    [read] = await store.claim_ownership([claim("0", "a")])
    clock.advance(5)
    [renewed] = await store.claim_ownership([read])
    assert renewed.etag != read.etag
    # When b claims with the etag it read
    lost = await store.claim_ownership([read.claimed_by("b")])
    # Then b loses and a still owns it; with the current etag b wins
    assert lost == []
    assert [o.owner_id for o in await store.list_ownership(GROUP)] == ["a"]
    [taken] = await store.claim_ownership([renewed.claimed_by("b")])
    assert (taken.owner_id, taken.last_modified_time) == ("b", clock.now)
    assert await store.list_ownership(GROUP) == [taken]


async def test_a_claim_without_etag_loses_when_a_record_exists(store):
    # Given a owns partition 0
    await store.claim_ownership([claim("0", "a")])
    # When b claims it as if it were new
    # Then b loses
    assert await store.claim_ownership([claim("0", "b")]) == []


async def test_the_same_partition_twice_in_one_batch_is_won_once(store):
    # When one batch claims partition 0 twice, and partition 1
    won = await store.claim_ownership([claim("0", "a"), claim("0", "b"), claim("1", "b")])
    # Then the first claim of 0 wins, the second (its etag now stale) loses
    assert sorted((o.partition_id, o.owner_id) for o in won) == [("0", "a"), ("1", "b")]


async def test_checkpoints_are_fenced_by_the_current_owner(store):
    # Given a owned partition 0 and checkpointed, then b took it over
    [mine] = await store.claim_ownership([claim("0", "a")])
    await store.update_checkpoint(checkpoint("0", 10), owner_id="a")
    await store.claim_ownership([mine.claimed_by("b")])
    await store.update_checkpoint(checkpoint("0", 20), owner_id="b")
    # When the stale owner a writes an older checkpoint
    with pytest.raises(OwnershipLost, match="a does not own partition 0"):
        await store.update_checkpoint(checkpoint("0", 15), owner_id="a")
    # Then the checkpoint is still b's
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 20)]


async def test_a_checkpoint_of_an_unowned_partition_is_refused(store):
    with pytest.raises(OwnershipLost):
        await store.update_checkpoint(checkpoint("3", 1), owner_id="a")
    assert await store.list_checkpoints(GROUP) == []


async def test_checkpoints_are_listed_per_group(store):
    # Given checkpoints of two partitions of GROUP and one of another group
    await store.claim_ownership([claim("0", "a"), claim("1", "a"), claim("0", "a", group=OTHER)])
    await store.update_checkpoint(checkpoint("0", 1), owner_id="a")
    await store.update_checkpoint(checkpoint("1", 2), owner_id="a")
    await store.update_checkpoint(checkpoint("1", 3), owner_id="a")
    await store.update_checkpoint(checkpoint("0", 9, group=OTHER), owner_id="a")
    # When GROUP's checkpoints are listed
    listed = await store.list_checkpoints(GROUP)
    # Then there are GROUP's latest ones only
    assert sorted(listed, key=lambda c: c.partition_id) == [checkpoint("0", 1), checkpoint("1", 3)]
    assert await store.list_checkpoints(OTHER) == [checkpoint("0", 9, group=OTHER)]


async def test_heartbeats_are_stamped_and_listed_per_group(store, clock):
    # Given two instances of GROUP beat, then one beats again later
    beat = Heartbeat(**vars(GROUP), instance_id="a")
    await store.heartbeat(beat)
    await store.heartbeat(replace(beat, instance_id="b"))
    clock.advance(7)
    stored = await store.heartbeat(beat)
    await store.heartbeat(Heartbeat(**vars(OTHER), instance_id="c"))
    # Then the store stamped its own time, and lists each instance once
    assert stored == replace(beat, last_modified_time=clock.now)
    listed = sorted(await store.list_heartbeats(GROUP), key=lambda h: h.instance_id)
    assert [(h.instance_id, h.last_modified_time) for h in listed] == [
        ("a", clock.now), ("b", clock.now - 7)]


async def test_a_wake_reaches_the_instances_next_heartbeat_once_and_keeps_its_time(
    store, clock,
):
    # Given instances a and b that beat, and another instance that listed them
    assert store.supports_wake
    await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
    await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))
    listed = {h.instance_id: h for h in await store.list_heartbeats(GROUP)}
    clock.advance(3)
    # When it wakes "a" (and "ghost", which never beat)
    await store.wake([listed["a"], Heartbeat(**vars(GROUP), instance_id="ghost")])
    # Then nobody looks fresher for it
    assert {h.instance_id: h.last_modified_time for h in await store.list_heartbeats(GROUP)
            } == {"a": clock.now - 3, "b": clock.now - 3}
    # and a's next heartbeat says so, once; b's and the ghost's do not
    assert (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))).woken
    assert not (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))).woken
    assert not (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))).woken
    assert not (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="ghost"))).woken
    # nor does the same id in another group
    assert not (await store.heartbeat(Heartbeat(**vars(OTHER), instance_id="a"))).woken


async def test_a_wake_crosses_processes_sharing_the_file(tmp_path, clock):
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointStore(path, clock=clock) as mine, \
            SqliteCheckpointStore(path, clock=clock) as theirs:
        await theirs.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))
        await mine.wake(await mine.list_heartbeats(GROUP))
        assert (await theirs.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))).woken


async def test_a_store_file_from_before_wakes_gets_them_when_opened(tmp_path, clock):
    # Given a store file without the wakes table (as an older version wrote it)
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointStore(path, clock=clock) as old:
        await old.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE heartbeat_wakes")
    conn.close()
    # When it is opened again, Then wakes work on it
    async with SqliteCheckpointStore(path, clock=clock) as store:
        await store.wake(await store.list_heartbeats(GROUP))
        assert (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="b"))).woken


# -- the file ---------------------------------------------------------------------------


async def test_everything_survives_a_reopen(tmp_path, clock):
    # Given a store with ownership, a checkpoint and a heartbeat, closed
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointStore(path, clock=clock) as first:
        [owned] = await first.claim_ownership([claim("0", "a")])
        await first.update_checkpoint(checkpoint("0", 42), owner_id="a")
        beat = await first.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
    # When the file is opened again
    async with SqliteCheckpointStore(path, clock=clock) as second:
        # Then all of it is there, and the etag still guards the claim
        assert await second.list_ownership(GROUP) == [owned]
        assert await second.list_checkpoints(GROUP) == [checkpoint("0", 42)]
        assert await second.list_heartbeats(GROUP) == [beat]
        assert await second.claim_ownership([claim("0", "b")]) == []
        assert len(await second.claim_ownership([owned.claimed_by("b")])) == 1


async def test_the_files_are_readable_by_the_owner_only(tmp_path):
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointStore(path) as store:
        await store.claim_ownership([claim("0", "a")])
        for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert stat.S_IMODE(os.stat(name).st_mode) == 0o600, name


def test_a_corrupt_file_is_a_one_line_config_error_naming_it(tmp_path):
    path = tmp_path / "checkpoints.db"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 200)
    with pytest.raises(ConfigError) as caught:
        SqliteCheckpointStore(path)
    message = str(caught.value)
    assert str(path) in message and "move it aside" in message and "\n" not in message


def test_some_other_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "queue.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(ConfigError, match="not a geogateway checkpoint store"):
        SqliteCheckpointStore(path)
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    conn.close()
    assert tables == ["messages"]


async def test_a_closed_store_says_so(tmp_path):
    store = SqliteCheckpointStore(tmp_path / "c.db")
    await store.aclose()
    await store.aclose()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        await store.list_ownership(GROUP)


_CLAIMER = textwrap.dedent("""
    import anyio, json, os, sys, time
    from gateway.consumer import ConsumerGroupRef, Ownership
    from gateway.consumer._sqlite_store import SqliteCheckpointStore

    path, owner, start, partitions = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    group = ConsumerGroupRef(**json.loads(sys.argv[5]))

    async def main():
        async with SqliteCheckpointStore(path) as store:
            while time.time() < start:
                time.sleep(0.001)
            won = []
            # Round 1: new partitions, one claim at a time; round 2: take over
            # whatever is listed, with the etags read.
            for p in range(partitions):
                won += await store.claim_ownership([Ownership(
                    **vars(group), partition_id=str(p), owner_id=owner)])
            seen = await store.list_ownership(group)
            # Take over only once both have listed (a barrier, not a time: a slow
            # machine must not let one list after the other's takeover).
            open(f"{path}.{owner}.listed", "w").close()
            while not all(os.path.exists(f"{path}.{o}.listed") for o in ("a", "b")):
                time.sleep(0.001)
            taken = await store.claim_ownership([o.claimed_by(owner) for o in seen])
            print(json.dumps([[o.partition_id for o in won], [o.partition_id for o in taken]]))

    anyio.run(main)
""")


def test_two_processes_claiming_the_same_partitions_win_each_exactly_once(tmp_path):
    # Given one store file and two processes that start claiming at the same instant
    path = tmp_path / "checkpoints.db"
    SqliteCheckpointStore(path)  # create it, so both processes open an existing file
    start = time.time() + 1.5
    partitions = 32
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, str(path), owner, str(start), str(partitions),
             json.dumps(vars(GROUP))],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for owner in ("a", "b")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    # Then every new partition was won by exactly one process
    (new_a, over_a), (new_b, over_b) = results
    assert sorted(new_a + new_b, key=int) == [str(p) for p in range(partitions)]
    # And in the takeover round (both with the etags they read) again at most one
    # won each partition, and no partition was won twice
    assert not set(over_a) & set(over_b)


# -- the Azure SDK's dict interface -------------------------------------------------------


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteCheckpointStore]:
    async with SqliteCheckpointStore(tmp_path / "checkpoints.db") as store:
        yield store


def _ownership_manager(store: object, owner_id: str, partitions: list[str]):
    """The SDK's own load balancer, on a stand-in client that only lists partitions."""
    from azure.eventhub import LoadBalancingStrategy
    from azure.eventhub.aio._eventprocessor._ownership_manager import OwnershipManager

    async def get_partition_ids() -> list[str]:
        return partitions

    client = SimpleNamespace(
        _address=SimpleNamespace(hostname=GROUP.fully_qualified_namespace),
        eventhub_name=GROUP.eventhub_name,
        get_partition_ids=get_partition_ids,
    )
    return OwnershipManager(client, GROUP.consumer_group, owner_id, store, 60.0,  # type: ignore[arg-type]
                            LoadBalancingStrategy.GREEDY, None)


async def test_the_sdk_load_balancer_claims_through_the_adapter(sqlite_store):
    # Given the adapter, registered as the SDK's CheckpointStore (lazily, here only)
    from azure.eventhub.aio import CheckpointStore as SdkCheckpointStoreABC

    adapter = sqlite_store.sdk()
    SdkCheckpointStoreABC.register(type(adapter))
    assert isinstance(adapter, SdkCheckpointStoreABC)
    # When two SDK load balancers share 4 partitions, as EventHubConsumerClient runs them
    first = _ownership_manager(adapter, "sdk-1", ["0", "1", "2", "3"])
    second = _ownership_manager(adapter, "sdk-2", ["0", "1", "2", "3"])
    assert sorted(await first.claim_ownership()) == ["0", "1", "2", "3"]
    for _ in range(3):
        await second.claim_ownership()
        await first.claim_ownership()
    # Then they end balanced, and geogateway's side sees the same owners
    owners = {o.partition_id: o.owner_id for o in await sqlite_store.list_ownership(GROUP)}
    assert sorted(owners.values()) == ["sdk-1", "sdk-1", "sdk-2", "sdk-2"]
    # And a graceful stop releases through claim_ownership with owner_id ""
    mine = [p for p, o in owners.items() if o == "sdk-2"]
    for partition in mine:
        await second.release_ownership(partition)
    released = {o.partition_id: o.owner_id for o in await sqlite_store.list_ownership(GROUP)}
    assert [released[p] for p in mine] == ["", ""]


async def test_sdk_checkpoints_round_trip_with_ours(sqlite_store):
    from azure.eventhub.aio import PartitionContext

    # Given partition 0 owned by geogateway instance "gg"
    adapter = sqlite_store.sdk()
    await sqlite_store.claim_ownership([claim("0", "gg")])
    # When the SDK checkpoints partition 1, as PartitionContext.update_checkpoint does
    context = PartitionContext(GROUP.fully_qualified_namespace, GROUP.eventhub_name,
                               GROUP.consumer_group, "1", adapter)
    event = SimpleNamespace(offset="4096", sequence_number=77)  # all it reads of an EventData
    await context.update_checkpoint(event)  # type: ignore[arg-type]
    # And geogateway checkpoints partition 0 (fenced)
    await sqlite_store.update_checkpoint(checkpoint("0", 5), owner_id="gg")
    # Then each side lists both, in its own shape
    sdk_view = await adapter.list_checkpoints(
        GROUP.fully_qualified_namespace, GROUP.eventhub_name, GROUP.consumer_group)
    assert sdk_view == [
        {**vars(GROUP), "partition_id": "0", "offset": "500", "sequence_number": 5},
        {**vars(GROUP), "partition_id": "1", "offset": "4096", "sequence_number": 77},
    ]
    assert await sqlite_store.list_checkpoints(GROUP) == [
        checkpoint("0", 5),
        Checkpoint(**vars(GROUP), partition_id="1", offset="4096", sequence_number=77),
    ]


async def test_sdk_ownership_dicts_carry_every_key_the_load_balancer_reads(sqlite_store):
    adapter = sqlite_store.sdk()
    await sqlite_store.claim_ownership([claim("0", "gg")])
    [record] = await adapter.list_ownership(
        GROUP.fully_qualified_namespace, GROUP.eventhub_name, GROUP.consumer_group)
    assert set(record) == {"fully_qualified_namespace", "eventhub_name", "consumer_group",
                           "partition_id", "owner_id", "last_modified_time", "etag"}
    assert isinstance(record["last_modified_time"], float)
    # A stale etag from the SDK side loses, as with our records
    assert await adapter.claim_ownership([{**record, "etag": "stale", "owner_id": "x"}]) == []


# -- damaged files and read-only opening ------------------------------------------------


async def _filled(path: Path, rows: int = 400) -> None:
    async with SqliteCheckpointStore(path) as store:
        for i in range(rows):
            await store.overwrite_checkpoint(Checkpoint(
                fully_qualified_namespace=GROUP.fully_qualified_namespace,
                eventhub_name=GROUP.eventhub_name, consumer_group=GROUP.consumer_group,
                partition_id=f"{i:05d}", offset=str(i), sequence_number=i))


async def test_a_damaged_page_is_refused_at_open_and_the_file_left_unchanged(tmp_path):
    # Given a store whose checkpoints table has a damaged page (the header is fine)
    path = tmp_path / "checkpoints.db"
    await _filled(path)
    digest = damage_table_root(path, "checkpoints")
    # When it is opened, read-write or read-only
    for read_only in (False, True):
        with pytest.raises(ConfigError) as caught:
            SqliteCheckpointStore(path, read_only=read_only)
        # Then one line names the file, the damage and what to do
        message = str(caught.value)
        assert str(path) in message and "move it aside" in message and "\n" not in message
        assert "page" in message
    # And not a byte of the file changed
    assert sha256(path) == digest


async def test_read_only_reads_everything_and_changes_nothing(tmp_path):
    # Given a store with records
    path = tmp_path / "checkpoints.db"
    await _filled(path, rows=3)
    digest, mtime = sha256(path), path.stat().st_mtime_ns
    await anyio.sleep(0.01)
    # When it is opened read-only and listed
    async with SqliteCheckpointStore(path, read_only=True) as store:
        found = await store.list_checkpoints(GROUP)
        # Then it lists the records, refuses writes, and leaves the file as it was
        assert [c.sequence_number for c in found] == [0, 1, 2]
        with pytest.raises(GatewayError, match="readonly"):
            await store.claim_ownership([claim("0", "a")])
    assert (sha256(path), path.stat().st_mtime_ns) == (digest, mtime)


def test_read_only_never_creates_a_missing_file(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(ConfigError, match=r"no checkpoint store at .*missing\.db") as caught:
        SqliteCheckpointStore(path, read_only=True)
    assert "\n" not in str(caught.value)
    assert not path.exists()
    with pytest.raises(ConfigError, match="no checkpoint store at"):
        SqliteCheckpointStore(tmp_path, read_only=True)


_KILLED_WRITER = textwrap.dedent("""
    import asyncio, sys, time
    from gateway.consumer import Heartbeat
    from gateway.consumer._sqlite_store import SqliteCheckpointStore

    async def main():
        store = SqliteCheckpointStore(sys.argv[1])
        for i in range(50):
            await store.heartbeat(Heartbeat(fully_qualified_namespace="ns",
                eventhub_name="hub", consumer_group="$Default", instance_id=f"i{i}"))
        print("written", flush=True)
        time.sleep(60)

    asyncio.run(main())
""")


def _write_then_get_killed(path: Path) -> int:
    """Run a writer, SIGKILL it once it wrote; the size of the WAL it left."""
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True) as writer:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
        writer.kill()
    return Path(f"{path}-wal").stat().st_size


async def test_a_store_left_by_a_killed_writer_is_not_taken_for_damaged(tmp_path):
    # Given a writer killed with SIGKILL while its records are still in the WAL
    path = tmp_path / "checkpoints.db"
    assert _write_then_get_killed(path) > 0
    group = ConsumerGroupRef(fully_qualified_namespace="ns", eventhub_name="hub",
                             consumer_group="$Default")
    # When it is opened, read-only then read-write / Then every record is there
    for read_only in (True, False):
        async with SqliteCheckpointStore(path, read_only=read_only) as store:
            assert len(await store.list_heartbeats(group)) == 50
