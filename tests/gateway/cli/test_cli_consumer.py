"""``geogateway consumer status`` on a local partitioned entity and a checkpoint store.

The store's records are written directly (no processor runs): ownership claims with a
clock set in the past, so lease ages are known; checkpoints; fresh and stale
heartbeats. Lag is checked exactly against the events sent to the local namespace.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.cli import _common
from gateway.consumer import (
    BlobCheckpointStore,
    Checkpoint,
    CheckpointStore,
    ConsumerGroupRef,
    Heartbeat,
    Ownership,
    SqliteCheckpointStore,
)
from gateway.transports import LocalNamespace, LocalTransport
from gateway.transports.local import PartitionInfo
from replication import Message, MessageRejected
from tests.azurite import connection_string
from tests.gateway.cli.cli_support import (
    Run,
    clean_env,
    expect_one_line_error,
    ok_json,
    run_process,
)
from tests.gateway.consumer._damage import damage_table_root, sha256

SECRET = "SECRET123"
HUB = "telemetry"
AGE = 100.0  # seconds since the ownership claims were written



@pytest.fixture(autouse=True)
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    return {**clean_env(monkeypatch, tmp_path), "store": tmp_path / "checkpoints.db"}


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables one line per row, whatever the terminal (rich folds at 80 columns)."""
    monkeypatch.setattr(_common.out, "_width", 200)


def group(namespace: str) -> dict[str, Any]:
    return {"fully_qualified_namespace": namespace, "eventhub_name": HUB,
            "consumer_group": "$Default"}


async def fill(store: CheckpointStore, *, now: Callable[[], None] | None = None) -> None:
    """primary: a owns 0 and 1, b owns 2 (both heartbeat now), c owns 3 but its
    heartbeat is stale; checkpoints on 0 (seq 1) and 2 (seq 0). secondary: a owns 0."""
    p, s = group("primary"), group("secondary")
    won = await store.claim_ownership(
        [Ownership(**p, partition_id=pid, owner_id=owner)
         for pid, owner in (("0", "proc-a"), ("1", "proc-a"), ("2", "proc-b"), ("3", "proc-c"))]
        + [Ownership(**s, partition_id="0", owner_id="proc-a")]
    )
    assert len(won) == 5
    await store.update_checkpoint(
        Checkpoint(**p, partition_id="0", offset="1", sequence_number=1), owner_id="proc-a")
    await store.update_checkpoint(
        Checkpoint(**p, partition_id="2", offset="0", sequence_number=0), owner_id="proc-b")
    await store.heartbeat(Heartbeat(**p, instance_id="proc-c"))
    if now is not None:
        now()
    for instance in ("proc-a", "proc-b"):
        await store.heartbeat(Heartbeat(**p, instance_id=instance))


@pytest.fixture
def hub(dirs: dict[str, Path]) -> Iterator[None]:
    """``telemetry`` with 4 partitions on both namespaces; 6 events on primary, round
    robin from partition 0 (last sequence numbers 1, 1, 0, 0); secondary empty."""
    namespaces = [LocalNamespace(n, data_dir=dirs["data"]) for n in ("primary", "secondary")]
    for ns in namespaces:
        ns.create_partitioned(HUB, partitions=4)

    async def send() -> None:
        async with LocalTransport("primary", data_dir=dirs["data"]) as t:
            await t.send(HUB, [Message(f"event {i}".encode()) for i in range(6)])

    anyio.run(send)
    yield
    for ns in namespaces:
        ns.close()


@pytest.fixture
def store(dirs: dict[str, Path], hub: None) -> Path:
    """The SQLite store, filled by :func:`fill`; claims and c's heartbeat AGE s old."""
    clock = [time.time() - AGE]

    def now() -> None:
        clock[0] = time.time()

    async def go() -> None:
        async with SqliteCheckpointStore(dirs["store"], clock=lambda: clock[0]) as made:
            await fill(made, now=now)

    anyio.run(go)
    return dirs["store"]


def by_partition(report: dict[str, Any], namespace: str) -> dict[str, dict[str, Any]]:
    [ns] = [n for n in report["namespaces"] if n["namespace"] == namespace]
    return {p["partition"]: p for p in ns["partitions"]}


# -- LocalNamespace.partition_info ---------------------------------------------------------


def test_partition_info(dirs: dict[str, Path], hub: None) -> None:
    with LocalNamespace("primary", data_dir=dirs["data"]) as ns:
        infos = ns.partition_info(HUB)
        assert [(i.partition_id, i.last_sequence_number, i.last_offset) for i in infos] == [
            ("0", 1, 7), ("1", 1, 7), ("2", 0, 0), ("3", 0, 0)]
        assert all(i.last_enqueued_time and i.last_enqueued_time <= time.time() for i in infos)
        with pytest.raises(MessageRejected, match="no partitioned entity 'nope'"):
            ns.partition_info("nope")
        ns.down()  # administration: still readable while the namespace is down
        assert ns.partition_info(HUB) == infos
    with LocalNamespace("secondary", data_dir=dirs["data"]) as ns:
        assert ns.partition_info(HUB)[3] == PartitionInfo(
            partition_id="3", last_sequence_number=None, last_offset=None,
            last_enqueued_time=None)


# -- the report ---------------------------------------------------------------------------


def test_status_json(run: Run, store: Path) -> None:
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json"))
    assert report["entity"] == HUB and report["consumer_group"] == "$Default"
    assert [n["namespace"] for n in report["namespaces"]] == ["primary", "secondary"]

    primary = by_partition(report, "primary")
    assert {p: (r["owner"], r["owner_alive"], r["checkpoint_sequence_number"],
                r["last_sequence_number"], r["lag"]) for p, r in primary.items()} == {
        "0": ("proc-a", True, 1, 1, 0),
        "1": ("proc-a", True, None, 1, 2),  # no checkpoint: every event is behind
        "2": ("proc-b", True, 0, 0, 0),
        "3": ("proc-c", False, None, 0, 1),  # heartbeat older than heartbeat_expiry
    }
    for row in primary.values():
        assert AGE <= row["lease_age_seconds"] < AGE + 60

    [ns] = [n for n in report["namespaces"] if n["namespace"] == "primary"]
    assert ns["state"] == "up" and ns["notes"] == [] and ns["total_lag"] == 3
    assert ns["instances_alive"] == 2 and ns["unowned"] == 1
    assert {i["instance_id"]: (i["alive"], i["partitions"]) for i in ns["instances"]} == {
        "proc-a": (True, 2), "proc-b": (True, 1), "proc-c": (False, 1)}
    assert 0 <= ns["instances"][0]["heartbeat_age_seconds"] < 60

    # secondary: empty partitions, one record whose owner lives by the record's age
    secondary = by_partition(report, "secondary")
    assert sorted(secondary) == ["0", "1", "2", "3"]
    assert secondary["0"]["owner"] == "proc-a" and secondary["0"]["owner_alive"] is True
    assert [(r["last_sequence_number"], r["lag"]) for r in secondary.values()] == [(None, 0)] * 4
    assert all(r["owner"] is None and r["lease_age_seconds"] is None
               for p, r in secondary.items() if p != "0")


def test_status_table(run: Run, store: Path) -> None:
    code, out, err = run("consumer", "status", "--store", str(store), "-e", HUB)
    assert code == 0 and err == "", err
    rows = [[c.strip() for c in line.split("│")[1:-1]]
            for line in out.splitlines() if line.startswith("│")]
    assert [[r[0], r[1], r[2], r[4], r[5], r[6], r[7]] for r in rows] == [
        ["primary", "0", "proc-a", "yes", "1", "1", "0"],
        ["primary", "1", "proc-a", "yes", "-", "1", "2"],
        ["primary", "2", "proc-b", "yes", "0", "0", "0"],
        ["primary", "3", "proc-c", "NO", "-", "0", "1"],
        ["secondary", "0", "proc-a", "yes", "-", "(empty)", "0"],
        ["secondary", "1", "-", "-", "-", "(empty)", "0"],
        ["secondary", "2", "-", "-", "-", "(empty)", "0"],
        ["secondary", "3", "-", "-", "-", "(empty)", "0"],
    ]
    assert all(float(r[3]) >= AGE for r in rows[:5]) and rows[5][3] == "-"
    assert "primary (up): 2 instance(s) alive: proc-a owns 2, proc-b owns 1" in out
    assert "not alive: proc-c owns 1" in out and "total lag 3" in out


def test_released_partition(run: Run, store: Path) -> None:
    async def release() -> None:
        async with SqliteCheckpointStore(store) as s:
            records = await s.list_ownership(ConsumerGroupRef(**group("primary")))
            [record] = [o for o in records if o.partition_id == "1"]
            assert await s.claim_ownership([record.claimed_by("")])

    anyio.run(release)
    row = by_partition(ok_json(run("consumer", "status", "--store", str(store), "-e", HUB,
                                   "--json", "--namespace", "primary")), "primary")["1"]
    assert row["owner"] is None and row["released"] is True and row["owner_alive"] is None
    assert 0 <= row["lease_age_seconds"] < 60 and row["lag"] == 2
    code, out, _ = run("consumer", "status", "--store", str(store), "-e", HUB)
    assert code == 0 and "(released)" in out


def test_a_leaving_instance_is_shown_alive_and_leaving(run: Run, store: Path) -> None:
    async def announce() -> None:
        async with SqliteCheckpointStore(store) as s:
            await s.heartbeat(Heartbeat(**group("primary"), instance_id="proc-b#leaving"))

    anyio.run(announce)
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json",
                         "--namespace", "primary"))
    [ns] = report["namespaces"]
    assert {i["instance_id"]: (i["alive"], i["leaving"]) for i in ns["instances"]} == {
        "proc-a": (True, False), "proc-b": (True, True), "proc-c": (False, False)}
    assert by_partition(report, "primary")["2"]["owner_alive"] is True
    code, out, _ = run("consumer", "status", "--store", str(store), "-e", HUB)
    assert code == 0 and "proc-b owns 1 (leaving)" in out


def test_namespace_down_shows_store_rows(run: Run, store: Path, dirs: dict[str, Path]) -> None:
    assert run("namespace", "down", "primary")[0] == 0
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json"))
    [ns] = [n for n in report["namespaces"] if n["namespace"] == "primary"]
    assert ns["state"] == "down" and "primary is down" in ns["notes"][0]
    primary = by_partition(report, "primary")
    assert [(r["owner"], r["checkpoint_sequence_number"], r["last_sequence_number"], r["lag"])
            for r in primary.values()] == [
        ("proc-a", 1, None, None), ("proc-a", None, None, None), ("proc-b", 0, None, None),
        ("proc-c", None, None, None)]
    # secondary is still up and reported as usual
    assert by_partition(report, "secondary")["0"]["lag"] == 0

    code, out, err = run("consumer", "status", "--store", str(store), "-e", HUB)
    assert code == 0 and err == ""
    assert "note: namespace primary is down" in out


def test_namespace_options(run: Run, store: Path, dirs: dict[str, Path]) -> None:
    # local:// prefix, one namespace only, a consumer group with nothing in the store
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json",
                         "--namespace", "local://primary", "--consumer-group", "audit"))
    [ns] = report["namespaces"]
    assert ns["namespace"] == "primary" and report["consumer_group"] == "audit"
    assert [(r["owner"], r["lag"]) for r in ns["partitions"]] == [
        (None, 2), (None, 2), (None, 1), (None, 1)]
    assert any("nothing for consumer group 'audit'" in n for n in ns["notes"])

    # a namespace with no local file: rows from the store, lag unknown, file not created
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json",
                         "--namespace", "primary", "--data-dir", str(dirs["tmp"] / "other")))
    [ns] = report["namespaces"]
    assert ns["state"] == "unknown" and "no local namespace primary" in ns["notes"][0]
    assert [r["lag"] for r in ns["partitions"]] == [None] * 4
    assert not (dirs["tmp"] / "other").exists()

    # an entity the namespace does not have
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", "nope", "--json",
                         "--namespace", "primary"))
    assert "no partitioned entity 'nope'" in report["namespaces"][0]["notes"][0]


def test_store_from_env(run: Run, store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEOGATEWAY_CHECKPOINT_STORE", str(store))
    report = ok_json(run("consumer", "status", "-e", HUB, "--json"))
    assert by_partition(report, "primary")["0"]["owner"] == "proc-a"


# -- bad input ----------------------------------------------------------------------------


def test_missing_store_file_is_not_created(run: Run, dirs: dict[str, Path], hub: None) -> None:
    missing = dirs["tmp"] / "missing.db"
    expect_one_line_error(run("consumer", "status", "--store", str(missing), "-e", HUB), 1,
                          "no checkpoint store at", "missing.db")
    assert not missing.exists()


def test_corrupt_store_file(run: Run, dirs: dict[str, Path], hub: None) -> None:
    corrupt = dirs["tmp"] / "corrupt.db"
    corrupt.write_bytes(b"this is not a database at all\n" * 200)
    expect_one_line_error(run("consumer", "status", "--store", str(corrupt), "-e", HUB), 1,
                          "corrupt.db", "is corrupt or unreadable")

    empty = dirs["tmp"] / "empty.db"
    empty.touch()
    expect_one_line_error(run("consumer", "status", "--store", str(empty), "-e", HUB), 1,
                          "empty file")
    assert empty.stat().st_size == 0

    expect_one_line_error(run("consumer", "status", "--store", str(dirs["tmp"]), "-e", HUB),
                          1, "is a directory")


def test_status_is_read_only(run: Run, store: Path) -> None:
    # Given a store in use: its writer still has it open, a new heartbeat in the WAL
    live = sqlite3.connect(store)
    live.execute("INSERT OR REPLACE INTO heartbeats VALUES (?, ?, ?, ?, ?)",
                 ("primary", HUB, "$Default", "proc-d", time.time()))
    live.commit()
    before = (sha256(store), store.stat().st_mtime_ns)
    time.sleep(0.01)
    # When status reads it, as JSON and as a table
    report = ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json"))
    code, _, _ = run("consumer", "status", "--store", str(store), "-e", HUB)
    # Then it saw the newest record, and the file's bytes and mtime are the same
    assert code == 0 and "proc-d" in json.dumps(report)
    assert (sha256(store), store.stat().st_mtime_ns) == before
    live.close()
    # And with nobody else holding it, the same
    before = (sha256(store), store.stat().st_mtime_ns)
    time.sleep(0.01)
    ok_json(run("consumer", "status", "--store", str(store), "-e", HUB, "--json"))
    assert (sha256(store), store.stat().st_mtime_ns) == before


def test_damaged_store_page(run: Run, store: Path) -> None:
    # Given a store with a damaged page in the middle (its header is intact)
    digest = damage_table_root(store, "ownership")
    # When status reads it / Then one line names the file and what to do, exit 1
    line = expect_one_line_error(run("consumer", "status", "--store", str(store), "-e", HUB),
                                 1, str(store), "corrupt", "move it aside")
    assert "Traceback" not in line
    # And the file is unchanged
    assert sha256(store) == digest


@pytest.mark.parametrize(("args", "words"), [
    (["--store", "x.db", "-e", HUB, "--bogus"], ["No such option", "--bogus"]),
    (["--store", "x.db"], ["--entity"]),
    (["-e", HUB], ["no checkpoint store"]),
    (["-e", HUB, "--store", "x.db", "--blob-connection-string", "UseDevelopmentStorage=true",
      "--container", "c"], ["not both"]),
    (["-e", HUB, "--blob-connection-string", "UseDevelopmentStorage=true"], ["--container"]),
    (["-e", HUB, "--store", "x.db", "--namespace", ""], ["namespace name is empty"]),
])
def test_bad_options(run: Run, args: list[str], words: list[str]) -> None:
    expect_one_line_error(run("consumer", "status", *args), 2, *words)


# -- blob store and secrets ---------------------------------------------------------------


def test_malformed_connection_string_stays_secret(run: Run, hub: None) -> None:
    bad = f"Foo=bar;AccountKey={SECRET}"
    line = expect_one_line_error(run("consumer", "status", "-e", HUB, "--container", "c",
                                     "--blob-connection-string", bad), 1,
                                 "--blob-connection-string")
    assert SECRET not in line


def test_blob_store_status(run: Run, hub: None, azurite: str, container: str,
                           store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        async with BlobCheckpointStore.from_connection_string(azurite, container) as made:
            await fill(made)

    anyio.run(go)
    # --blob-connection-string on the command line beats GEOGATEWAY_CHECKPOINT_STORE
    monkeypatch.setenv("GEOGATEWAY_CHECKPOINT_STORE", str(store))
    monkeypatch.setenv("GEOGATEWAY_BLOB_CONNECTION_STRING", azurite)
    result = run("consumer", "status", "-e", HUB, "--json", "--container", container,
                 "--blob-connection-string", azurite)
    report = ok_json(result)
    assert report["store"] == f"blob container {container}"
    primary = by_partition(report, "primary")
    assert {p: (r["owner"], r["lag"]) for p, r in primary.items()} == {
        "0": ("proc-a", 0), "1": ("proc-a", 2), "2": ("proc-b", 0), "3": ("proc-c", 1)}
    assert all(0 <= r["lease_age_seconds"] < 60 for r in primary.values())
    # proc-c's heartbeat is fresh here (a real clock): all three are alive
    [ns] = [n for n in report["namespaces"] if n["namespace"] == "primary"]
    assert ns["instances_alive"] == 3
    key = azurite.split("AccountKey=")[1].split(";")[0]
    assert key not in result[1] and key not in result[2]

    # Both only from the environment: refused, nothing printed of either
    line = expect_one_line_error(run("consumer", "status", "-e", HUB, "--container",
                                     container), 2, "not both")
    assert key not in line


def test_wrong_key_is_one_line_without_the_key(dirs: dict[str, Path], hub: None,
                                               azurite_port: int, container: str) -> None:
    wrong = connection_string(azurite_port, key="V1JPTkctS0VZLVNFQ1JFVDEyMw==")
    result = run_process("consumer", "status", "-e", HUB, "--container", container,
                         "--blob-connection-string", wrong, cwd=dirs["tmp"])
    line = expect_one_line_error(result, 1, "refused the credential")
    assert "V1JPTkctS0VZLVNFQ1JFVDEyMw" not in result[1] + result[2]
    assert container in line


def test_process_happy_path(dirs: dict[str, Path], store: Path) -> None:
    code, out, err = run_process("consumer", "status", "--store", str(store), "-e", HUB,
                                 "--json", cwd=dirs["tmp"])
    assert code == 0 and err == "", err
    assert by_partition(json.loads(out), "primary")["1"]["lag"] == 2
