"""``geogateway status``: the same look at a gateway as ``/status``, for a config file:
roles from the roles store, health, the backlog, partition owners and lag."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from gateway.cli import _common
from gateway.consumer import Checkpoint, Ownership, SqliteCheckpointStore
from gateway.stores import RoleStore
from gateway.transports import LocalNamespace, LocalTransport
from replication import Message, RoleState
from tests.gateway.cli.cli_support import Run, expect_one_line_error, ok_json
from tests.gateway.observability.serving import ENTITY, make_gateway

pytestmark = pytest.mark.usefixtures("dirs")


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables one line per row, whatever the terminal (rich folds at 80 columns)."""
    monkeypatch.setattr(_common.out, "_width", 200)


def test_a_ready_gateway(run: Run, dirs: dict[str, Path]) -> None:
    config = make_gateway(dirs)
    code, out, _ = run("status", "--config", str(config))
    assert code == 0, out
    assert "ready (checked" in out and "NOT READY" not in out
    assert "primary   │ primary       │ local://primary   │ active  │ up" in out
    data = ok_json(run("status", "--config", str(config), "--json"))
    assert data["ready"] is True
    assert [(n["name"], n["role"], n["state"]) for n in data["namespaces"]] == [
        ("primary", "active", "up"), ("secondary", "standby", "up")]
    assert data["durable_queue"]["exists"] is False and data["durable_queue"]["writable"]
    assert "no role state" in data["notes"][0]


def test_roles_come_from_the_roles_store(run: Run, dirs: dict[str, Path]) -> None:
    # Given a sender that failed over to the secondary (its roles file says so)
    config = make_gateway(dirs)
    RoleStore.of_pair(dirs["state"], "primary", "secondary").save(
        RoleState.initial("primary", "secondary").swap(time.time()))
    data = ok_json(run("status", "--config", str(config), "--json"))
    assert [(n["name"], n["role"]) for n in data["namespaces"]] == [
        ("primary", "standby"), ("secondary", "active")]
    assert data["notes"] == []


def test_not_ready_exits_3_and_says_why(run: Run, dirs: dict[str, Path]) -> None:
    config = make_gateway(dirs)
    for name in ("primary", "secondary"):
        LocalNamespace(name, data_dir=dirs["data"]).down()
    code, out, _ = run("status", "--config", str(config))
    assert code == 3
    assert "NOT READY" in out and "no namespace is usable" in out
    code, out, _ = run("status", "--config", str(config), "--json")
    assert code == 3 and json.loads(out)["ready"] is False


def test_a_missing_local_namespace_file_is_not_created(run: Run, dirs: dict[str, Path]) -> None:
    # Given namespaces nothing has used yet (no files): the control files decide
    config = make_gateway(dirs, create=False)
    LocalNamespace("secondary", data_dir=dirs["data"]).down()
    data = ok_json(run("status", "--config", str(config), "--json"))
    assert [(n["name"], n["state"]) for n in data["namespaces"]] == [
        ("primary", "up"), ("secondary", "down")]
    assert not (dirs["data"] / "primary.db").exists()
    assert not (dirs["data"] / "secondary.db").exists()


def test_partition_owners_and_lag_from_the_checkpoint_store(
        run: Run, dirs: dict[str, Path]) -> None:
    # Given a partitioned entity with 6 events on the primary's 2 partitions, and a
    # store where proc-a owns both and checkpointed partition 0 at sequence number 1
    for name in ("primary", "secondary"):
        with LocalNamespace(name, data_dir=dirs["data"]) as ns:
            ns.create_partitioned(ENTITY, partitions=2)
    store = dirs["tmp"] / "checkpoints.db"

    async def fill() -> None:
        async with LocalTransport("primary", data_dir=dirs["data"]) as t:
            await t.send(ENTITY, [Message(f"event {i}".encode()) for i in range(6)])
        async with SqliteCheckpointStore(store) as made:
            group = {"fully_qualified_namespace": "primary", "eventhub_name": ENTITY,
                     "consumer_group": "$Default"}
            await made.claim_ownership([Ownership(**group, partition_id=pid, owner_id="proc-a")
                                        for pid in ("0", "1")])
            await made.update_checkpoint(
                Checkpoint(**group, partition_id="0", offset="1", sequence_number=1),
                owner_id="proc-a")

    anyio.run(fill)
    config = make_gateway(dirs, create=False)
    # When the status is asked with the store
    data = ok_json(run("status", "--config", str(config), "--checkpoint-store", str(store),
                       "--json"))
    # Then each partition's owner and lag (events after the checkpoint) show
    consumers = data["consumers"]
    assert consumers["error"] is None and consumers["consumer_group"] == "$Default"
    primary = {p["partition"]: (p["owner"], p["lag"])
               for p in consumers["namespaces"][0]["partitions"]}
    assert primary == {"0": ("proc-a", 1), "1": ("proc-a", 3)}
    code, out, _ = run("status", "--config", str(config), "--checkpoint-store", str(store))
    assert code == 0 and "consumer group $Default" in out and "proc-a" in out


def test_a_missing_checkpoint_store_is_reported_not_created(
        run: Run, dirs: dict[str, Path]) -> None:
    config = make_gateway(dirs)
    missing = dirs["tmp"] / "none.db"
    data = ok_json(run("status", "--config", str(config), "--checkpoint-store", str(missing),
                       "--json"))
    assert "no checkpoint store" in data["consumers"]["error"] and not missing.exists()


def test_a_checkpoint_store_needs_an_entity(run: Run, dirs: dict[str, Path]) -> None:
    result = run("status", "--checkpoint-store", str(dirs["tmp"] / "c.db"))
    expect_one_line_error(result, 2, "--checkpoint-store needs the entity")
