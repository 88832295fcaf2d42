from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator import Emulator, EventHubSpec, QueueSpec

#: The entities every emulator fixture declares.
QUEUE = "orders"
SHORT_LOCK = "short-lock"  # lock_duration 1 s, 3 deliveries
SMALL = "small"  # max_message_size 2000 bytes
HUB = "telemetry"  # 4 partitions


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def emulator(data_dir: Path) -> AsyncIterator[Emulator]:
    emu = Emulator(
        {"primary": 0, "secondary": 0},
        data_dir=data_dir,
        queues=[QUEUE, QueueSpec(name=SHORT_LOCK, lock_duration=1.0, max_delivery_count=3),
                QueueSpec(name=SMALL, max_message_size=2000)],
        event_hubs=[EventHubSpec(name=HUB, partitions=4)],
    )
    async with emu:
        yield emu


@pytest.fixture
def conn_str(emulator: Emulator) -> str:
    return emulator.connection_string("primary")
