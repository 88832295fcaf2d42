"""The emulator closes every socket it accepted: when its namespace goes down, and when
it shuts down. (The test suite ignores the sockets the Azure SDKs leave to the garbage
collector, see ``pyproject.toml``; the emulator's own are checked here, where no SDK runs.)
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import pytest

from gateway.amqp._frames import AMQP_HEADER, SASL_HEADER
from gateway.emulator import Emulator
from tests.gateway.emulator.amqp.test_hang import namespace_faults
from tests.gateway.emulator.amqp.test_protocol import Raw, open_session
from tests.gateway.emulator.conftest import QUEUE

pytestmark = pytest.mark.anyio


def collected_resource_warnings() -> list[str]:
    """The ResourceWarnings of what the garbage collector finds unclosed now."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if w.category is ResourceWarning]


async def eof_within(raw: Raw, seconds: float) -> bool:
    """Whether the emulator closes ``raw`` within ``seconds`` (what it sends is read)."""
    try:
        async with asyncio.timeout(seconds):
            while await raw.reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def connections(port: int, *, session: bool = True) -> dict[str, Raw]:
    """One connection in each stage a namespace holds them in (but an open session,
    unless ``session``: a hung namespace opens none)."""
    async def connect() -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return Raw(reader, writer)

    raws = {name: await connect() for name in ("silent", "amqp header", "sasl")}
    raws["amqp header"].writer.write(AMQP_HEADER)
    raws["sasl"].writer.write(SASL_HEADER)
    if session:
        raws["session"] = await connect()
        await open_session(raws["session"])
    await asyncio.sleep(0.1)  # the emulator has read what each sent
    return raws


async def test_a_namespace_that_goes_down_closes_every_connection(tmp_path: Path) -> None:
    with warnings.catch_warnings():  # what earlier tests left is theirs
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    data_dir = tmp_path / "data"
    async with Emulator({"primary": 0}, data_dir=data_dir, queues=[QUEUE]) as emu:
        # Given connections at every stage, one of them on a namespace that hangs
        raws = await connections(emu.port("primary"))
        namespace_faults(data_dir, "--hang")
        hung = await connections(emu.port("primary"), session=False)
        # When the namespace goes down
        await asyncio.to_thread(namespace_faults_down, data_dir)
        # Then the emulator closes each of them
        still_open = [f"{name}{' (hung)' if group is hung else ''}"
                      for group in (raws, hung) for name, raw in group.items()
                      if not await eof_within(raw, 5)]
        assert still_open == []
        # And a connection that comes while it is down is refused
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", emu.port("primary"))
        for raw in [*raws.values(), *hung.values()]:
            raw.writer.close()
            await raw.writer.wait_closed()
    # And nothing it accepted is left for the garbage collector
    assert collected_resource_warnings() == []


async def test_shutting_down_closes_every_connection(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    async with Emulator({"primary": 0}, data_dir=tmp_path / "data", queues=[QUEUE]) as emu:
        raws = await connections(emu.port("primary"))
    still_open = [name for name, raw in raws.items() if not await eof_within(raw, 5)]
    assert still_open == []
    for raw in raws.values():
        raw.writer.close()
        await raw.writer.wait_closed()
    assert collected_resource_warnings() == []


def namespace_faults_down(data_dir: Path) -> None:
    from gateway.cli import main

    assert main(["namespace", "down", "primary", "--data-dir", str(data_dir)]) == 0
