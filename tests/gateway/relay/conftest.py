"""Fixtures of the relay tests: a real relay emulator on free loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator.relay._emulator import RelayEmulator

HC = "orders"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[RelayEmulator]:
    async with RelayEmulator({"primary": 0, "secondary": 0}, [HC], data_dir=tmp_path,
                             answer_timeout=5.0) as emu:
        yield emu
