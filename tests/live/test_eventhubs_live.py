"""EventHubsTransport against a real Event Hubs namespace (see conftest for the variables)."""

from __future__ import annotations

import re
import time

import pytest

from gateway.transports import EventPosition, PartitionEvent
from gateway.transports.eventhubs import EventHubsTransport
from replication import Message, MessageRejected, OwnershipLost

pytestmark = [pytest.mark.azure, pytest.mark.anyio]


async def _find(eh: EventHubsTransport, hub: str, since: float, ids: set[str], *,
                timeout: float = 60.0) -> dict[str, PartitionEvent]:
    """Read every partition from enqueued time ``since`` until all ``ids`` were seen."""
    found: dict[str, PartitionEvent] = {}
    positions = {pid: EventPosition(enqueued_time=since)
                 for pid in await eh.get_partition_ids(hub)}
    deadline = time.monotonic() + timeout
    while set(found) != ids and time.monotonic() < deadline:
        for pid, position in positions.items():
            events = await eh.read_partition(hub, pid, position=position, max_wait=1)
            if events:
                positions[pid] = EventPosition(sequence_number=events[-1].sequence_number)
            found.update({e.message.message_id: e for e in events
                          if e.message.message_id in ids})
    assert set(found) == ids, f"missing {sorted(ids - set(found))}"
    return found


async def test_send_and_read(eventhubs: EventHubsTransport,
                             eventhubs_settings: tuple[str, str], run_id: str) -> None:
    hub = eventhubs_settings[1]
    since = time.time() - 5
    keyed = [Message(f"k{i}".encode(), message_id=f"{run_id}-k{i}", partition_key=run_id,
                     properties={"i": i, "big": 2**40}) for i in range(3)]
    loose = [Message(b"r", message_id=f"{run_id}-r{i}") for i in range(3)]
    await eventhubs.send(hub, [*keyed, *loose])
    found = await _find(eventhubs, hub, since, {m.message_id for m in keyed + loose})
    together = [found[m.message_id] for m in keyed]
    assert len({e.partition_id for e in together}) == 1
    assert [e.sequence_number for e in together] == sorted(e.sequence_number for e in together)
    assert together[0].message == keyed[0]


async def test_owner_level_takeover(eventhubs: EventHubsTransport,
                                    eventhubs_settings: tuple[str, str]) -> None:
    conn_str, hub = eventhubs_settings
    pid = (await eventhubs.get_partition_ids(hub))[0]
    # Given a reader with owner level 1
    position = EventPosition(enqueued_time=time.time() - 3600)
    mine = await eventhubs.read_partition(hub, pid, position=position, max_wait=5, owner_level=1)
    if mine:
        position = EventPosition(sequence_number=mine[-1].sequence_number)
    async with EventHubsTransport.from_connection_string(conn_str, name="live",
                                                         operation_timeout=10.0) as other:
        # When another takes the partition with owner level 2
        await other.read_partition(hub, pid, position=EventPosition(latest=True), max_wait=5,
                                   owner_level=2)
        # Then the first one's reads (continuing where they were) end with OwnershipLost
        with pytest.raises(OwnershipLost):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                events = await eventhubs.read_partition(hub, pid, position=position,
                                                        max_wait=1, owner_level=1)
                if events:
                    position = EventPosition(sequence_number=events[-1].sequence_number)


async def test_probe_and_refusals(eventhubs: EventHubsTransport,
                                  eventhubs_settings: tuple[str, str]) -> None:
    await eventhubs.probe()
    with pytest.raises(MessageRejected):
        await eventhubs.get_partition_ids(f"geogateway-missing-{int(time.time())}")
    conn_str = eventhubs_settings[0]
    wrong = re.sub(r"(?i)(SharedAccessKey=)[^;]+", r"\1d3Jvbmcta2V5LXdyb25nLWtleQ==", conn_str)
    key = re.search(r"(?i)SharedAccessKey=([^;]+)", conn_str)
    async with EventHubsTransport.from_connection_string(wrong, name="live") as bad:
        with pytest.raises(MessageRejected) as info:
            await bad.get_partition_ids(eventhubs_settings[1])
    assert key is None or key.group(1) not in str(info.value)
