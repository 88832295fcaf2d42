"""BlobCheckpointStore against Azurite: claims on etags, fenced checkpoints, errors
mapped (never a won claim), and interop with the Event Hubs SDK's own blob store in
both directions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import AioHttpTransport
from azure.eventhub.extensions.checkpointstoreblobaio import (
    BlobCheckpointStore as SdkBlobCheckpointStore,
)
from azure.storage.blob import ContainerClient as SyncContainerClient
from azure.storage.blob.aio import ContainerClient

from gateway.consumer import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._blob_store import BlobCheckpointStore
from replication import ConfigError, GatewayError, OwnershipLost
from tests.azurite import connection_string

from .conftest import GROUP

pytestmark = pytest.mark.anyio

NS, HUB, CG = GROUP.fully_qualified_namespace, GROUP.eventhub_name, GROUP.consumer_group
# The SDK's layout: the whole name lower-cased.
PREFIX = "geo-ns.servicebus.windows.net/orders/$default"


def claim(partition: str, owner: str, etag: str | None = None,
          group: ConsumerGroupRef = GROUP) -> Ownership:
    return Ownership(**vars(group), partition_id=partition, owner_id=owner, etag=etag)


def checkpoint(partition: str, sequence: int) -> Checkpoint:
    return Checkpoint(**vars(GROUP), partition_id=partition, offset=str(sequence * 100),
                      sequence_number=sequence)


@pytest.fixture
async def store(azurite: str, container: str) -> AsyncIterator[BlobCheckpointStore]:
    async with BlobCheckpointStore.from_connection_string(azurite, container) as made:
        yield made


@pytest.fixture
async def rival(azurite: str, container: str) -> AsyncIterator[BlobCheckpointStore]:
    """A second instance, on its own client (another machine)."""
    async with BlobCheckpointStore.from_connection_string(azurite, container) as made:
        yield made


@pytest.fixture
async def sdk_store(azurite: str, container: str) -> AsyncIterator[Any]:
    """The Event Hubs SDK's own blob checkpoint store on the same container."""
    async with SdkBlobCheckpointStore.from_connection_string(azurite, container) as made:
        yield made


def blobs(azurite: str, container: str) -> dict[str, dict[str, str]]:
    with SyncContainerClient.from_connection_string(azurite, container) as client:
        return {b.name: dict(b.metadata) for b in client.list_blobs(include=["metadata"])}


# -- claims -------------------------------------------------------------------------------


async def test_a_new_claim_is_an_empty_blob_in_the_sdk_layout(store, azurite, container):
    # When instance a claims partition 0 of a new group
    [won] = await store.claim_ownership([claim("0", "a")])
    # Then it won, with the blob's etag and time, and the blob is where the SDK looks
    assert won.owner_id == "a" and won.etag and isinstance(won.last_modified_time, float)
    assert blobs(azurite, container) == {f"{PREFIX}/ownership/0": {"ownerid": "a"}}
    assert await store.list_ownership(GROUP) == [won]


async def test_a_claim_with_a_stale_etag_loses_and_the_current_etag_wins(store, rival):
    # Given a owns partition 0, b read it, then a renewed
    [read] = await store.claim_ownership([claim("0", "a")])
    [renewed] = await store.claim_ownership([read])
    assert renewed.etag != read.etag
    # When b claims with the etag it read, it loses; with the current one it wins
    assert await rival.claim_ownership([read.claimed_by("b")]) == []
    assert [o.owner_id for o in await store.list_ownership(GROUP)] == ["a"]
    [taken] = await rival.claim_ownership([renewed.claimed_by("b")])
    assert [(o.owner_id, o.etag) for o in await store.list_ownership(GROUP)] == [
        ("b", taken.etag)]


async def test_a_claim_without_etag_loses_when_the_blob_exists(store, rival):
    await store.claim_ownership([claim("0", "a")])
    assert await rival.claim_ownership([claim("0", "b")]) == []


async def test_concurrent_claimers_win_each_partition_exactly_once(store, rival):
    # Given two instances that both claim the same 16 new partitions at once
    import anyio

    wins: dict[str, list[Ownership]] = {}

    async def run(name: str, on: BlobCheckpointStore) -> None:
        wins[name] = await on.claim_ownership([claim(str(p), name) for p in range(16)])

    async with anyio.create_task_group() as group:
        group.start_soon(run, "a", store)
        group.start_soon(run, "b", rival)
    # Then each partition went to exactly one of them, and the store agrees
    won = sorted((o.partition_id for o in wins["a"] + wins["b"]), key=int)
    assert won == [str(p) for p in range(16)]
    listed = {o.partition_id: o.owner_id for o in await store.list_ownership(GROUP)}
    assert listed == {o.partition_id: o.owner_id for o in wins["a"] + wins["b"]}


# -- checkpoints and heartbeats -----------------------------------------------------------


async def test_a_stale_owner_cannot_move_the_checkpoint(store, rival):
    # Given a owned partition 0 and checkpointed; b took it over and checkpointed further
    [mine] = await store.claim_ownership([claim("0", "a")])
    await store.update_checkpoint(checkpoint("0", 10), owner_id="a")
    await rival.claim_ownership([mine.claimed_by("b")])
    await rival.update_checkpoint(checkpoint("0", 20), owner_id="b")
    # When a writes its older checkpoint
    with pytest.raises(OwnershipLost, match="a does not own partition 0"):
        await store.update_checkpoint(checkpoint("0", 15), owner_id="a")
    # Then b's stands; and a partition nobody owns is refused too
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 20)]
    with pytest.raises(OwnershipLost):
        await store.update_checkpoint(checkpoint("1", 1), owner_id="a")


async def test_a_takeover_between_the_owner_check_and_the_write_is_caught(
    store, rival, monkeypatch
):
    # Given a owns partition 0 with a checkpoint
    [mine] = await store.claim_ownership([claim("0", "a")])
    await store.update_checkpoint(checkpoint("0", 10), owner_id="a")
    # And, just after a has checked that it still owns it, b takes over and checkpoints
    properties = store._properties
    calls = 0

    async def racing(blob: Any, what: str) -> Any:
        nonlocal calls
        result = await properties(blob, what)
        calls += 1
        if calls == 2:
            await rival.claim_ownership([mine.claimed_by("b")])
            await rival.update_checkpoint(checkpoint("0", 30), owner_id="b")
        return result

    monkeypatch.setattr(store, "_properties", racing)
    # When a's write lands after that
    with pytest.raises(OwnershipLost):
        await store.update_checkpoint(checkpoint("0", 11), owner_id="a")
    # Then it failed on the checkpoint's etag, and b's checkpoint stands
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 30)]


async def test_checkpoints_and_heartbeats_are_listed(store, azurite, container):
    await store.claim_ownership([claim("0", "a"), claim("1", "a")])
    await store.update_checkpoint(checkpoint("0", 1), owner_id="a")
    await store.update_checkpoint(checkpoint("1", 2), owner_id="a")
    await store.update_checkpoint(checkpoint("1", 3), owner_id="a")
    beat = await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="Instance-A"))
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 1), checkpoint("1", 3)]
    assert isinstance(beat.last_modified_time, float)
    assert await store.list_heartbeats(GROUP) == [beat]
    assert await store.list_heartbeats(replace(GROUP, consumer_group="other")) == []
    names = blobs(azurite, container)
    assert names[f"{PREFIX}/checkpoint/1"] == {"offset": "300", "sequencenumber": "3"}
    assert f"{PREFIX}/geogateway-heartbeats/Instance-A" in names


async def test_a_wake_reaches_the_next_heartbeat_without_making_anyone_look_fresher(
    store, rival, azurite, container,
):
    # Given instance a beat (through its store), and another instance listed it
    assert store.supports_wake
    beat = await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="Instance-A"))
    assert not beat.woken
    [listed] = await rival.list_heartbeats(GROUP)
    assert listed.last_modified_time == beat.last_modified_time and listed.etag
    # When the other wakes it
    await rival.wake([listed])
    # Then the blob says so, and listings still show a's own last heartbeat time
    name = f"{PREFIX}/geogateway-heartbeats/Instance-A"
    assert blobs(azurite, container)[name]["wake"] == "1"
    [again] = await rival.list_heartbeats(GROUP)
    assert again.last_modified_time == beat.last_modified_time and again.etag != listed.etag
    # and a's next heartbeat is woken (and clears the mark), the one after is not
    first = await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="Instance-A"))
    assert first.woken and blobs(azurite, container)[name] == {}
    assert not (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="Instance-A"))).woken
    [fresh] = await rival.list_heartbeats(GROUP)
    assert fresh.last_modified_time is not None and beat.last_modified_time is not None
    assert fresh.last_modified_time >= beat.last_modified_time


async def test_a_wake_on_a_heartbeat_written_since_it_was_listed_is_dropped(
    store, rival, azurite, container,
):
    await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
    [listed] = await rival.list_heartbeats(GROUP)
    newer = await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))
    # The wake is conditional on the listed etag: it must not roll a's time back
    await rival.wake([listed])
    assert blobs(azurite, container)[f"{PREFIX}/geogateway-heartbeats/a"] == {}
    [now] = await rival.list_heartbeats(GROUP)
    assert now.etag == newer.etag
    assert not (await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="a"))).woken


async def test_a_checkpoint_without_a_position_is_refused(store):
    await store.claim_ownership([claim("0", "a")])
    with pytest.raises(ConfigError, match="needs both offset and sequence_number"):
        await store.update_checkpoint(replace(checkpoint("0", 1), offset=None), owner_id="a")


# -- errors ---------------------------------------------------------------------------------


async def test_a_missing_container_is_a_config_error_not_a_won_claim(azurite):
    async with BlobCheckpointStore.from_connection_string(azurite, "no-such-container") as store:
        with pytest.raises(ConfigError, match="does not exist"):
            await store.claim_ownership([claim("0", "a")])
        with pytest.raises(ConfigError, match="does not exist"):
            await store.update_checkpoint(checkpoint("0", 1), owner_id="a")
        with pytest.raises(ConfigError):
            await store.list_ownership(GROUP)


async def test_a_wrong_key_is_a_config_error_not_a_won_claim(azurite_port, container):
    wrong = connection_string(azurite_port, key="d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk=")
    async with BlobCheckpointStore.from_connection_string(wrong, container) as store:
        with pytest.raises(ConfigError, match="refused the credential"):
            await store.claim_ownership([claim("0", "a")])
        with pytest.raises(ConfigError, match="refused the credential"):
            await store.list_checkpoints(GROUP)


class LosingTransport(AioHttpTransport):  # type: ignore[misc]
    """The server does every write, then its reply is lost on the way back."""

    async def send(self, request: Any, **kwargs: Any) -> Any:
        response = await super().send(request, **kwargs)
        if request.method != "PUT":
            return response
        await response.load_body()
        raise ServiceResponseError("connection reset while reading the reply")


async def test_a_lost_reply_is_raised_and_not_taken_as_a_won_claim(azurite, container, store):
    # Given a store whose every write reply is lost after the write happened
    client = ContainerClient.from_connection_string(
        azurite, container, transport=LosingTransport(), retry_total=0
    )
    async with client, BlobCheckpointStore(client) as broken:
        # When it claims two partitions
        # Then the error is raised as a GatewayError, and nothing is reported won
        with pytest.raises(GatewayError, match="failed to claim ownership") as caught:
            await broken.claim_ownership([claim("0", "a"), claim("1", "a")])
        assert not isinstance(caught.value, (ConfigError, OwnershipLost))
    # (the service did store them: the outcome was unknown, which is not a win)
    assert len(await store.list_ownership(GROUP)) == 2


# -- interop with azure-eventhub-checkpointstoreblob-aio -----------------------------------


async def test_the_sdk_reads_what_geogateway_wrote(store, sdk_store):
    # Given geogateway owns two partitions and checkpointed them
    owned = await store.claim_ownership([claim("0", "gg-1"), claim("1", "gg-2")])
    await store.update_checkpoint(checkpoint("0", 7), owner_id="gg-1")
    await store.update_checkpoint(checkpoint("1", 8), owner_id="gg-2")
    await store.heartbeat(Heartbeat(**vars(GROUP), instance_id="gg-1"))
    # When the SDK's store lists the group
    ownership = await sdk_store.list_ownership(NS, HUB, CG)
    checkpoints = await sdk_store.list_checkpoints(NS, HUB, CG)
    # Then it sees the same owners, etags, offsets and sequence numbers (no heartbeats)
    assert sorted((o["partition_id"], o["owner_id"], o["etag"]) for o in ownership) == sorted(
        (o.partition_id, o.owner_id, o.etag) for o in owned)
    assert sorted(checkpoints, key=lambda c: c["partition_id"]) == [
        checkpoint("0", 7).to_sdk(), checkpoint("1", 8).to_sdk()]
    # And the SDK can take a partition over with the etag it read
    taken = await sdk_store.claim_ownership([{**ownership[0], "owner_id": "sdk"}])
    assert [o["owner_id"] for o in taken] == ["sdk"]


async def test_geogateway_reads_what_the_sdk_wrote(store, sdk_store):
    # Given the SDK claimed two partitions, checkpointed them, and released one
    claimed = await sdk_store.claim_ownership([
        {**vars(GROUP), "partition_id": p, "owner_id": "sdk"} for p in ("0", "1")])
    assert len(claimed) == 2
    for partition, sequence in (("0", 40), ("1", 41)):
        await sdk_store.update_checkpoint(
            {**vars(GROUP), "partition_id": partition, "offset": str(sequence * 100),
             "sequence_number": sequence})
    released = next(o for o in claimed if o["partition_id"] == "1")
    await sdk_store.claim_ownership([{**released, "owner_id": ""}])
    # When geogateway lists the group
    ownership = {o.partition_id: o for o in await store.list_ownership(GROUP)}
    # Then it sees the SDK's owners and positions, the released partition with no owner
    assert {p: o.owner_id for p, o in ownership.items()} == {"0": "sdk", "1": ""}
    assert await store.list_checkpoints(GROUP) == [checkpoint("0", 40), checkpoint("1", 41)]
    # And it takes partition 1 over with the etag read, and checkpoints it, fenced
    [mine] = await store.claim_ownership([ownership["1"].claimed_by("gg")])
    await store.update_checkpoint(checkpoint("1", 42), owner_id="gg")
    assert (await sdk_store.list_checkpoints(NS, HUB, CG))[1]["sequence_number"] == 42
    # While the SDK's stale view of partition 1 no longer wins it back
    assert await sdk_store.claim_ownership([{**released, "owner_id": "sdk"}]) == []
    assert mine.etag != released["etag"]
