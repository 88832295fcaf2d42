"""The unmodified JavaScript SDKs (@azure/service-bus, @azure/event-hubs) against the emulator.

The README's test command installs them from the npm registry into ``.jssdk/``; the
node script ``servicebus_check.mjs`` beside this file runs every check and exits
non-zero with a message on the first SDK error or differing result.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator import Emulator, EventHubSpec, QueueSpec, SubscriptionSpec, TopicSpec

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = Path(__file__).with_name("servicebus_check.mjs")
PREFIX = ROOT / ".jssdk"


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    topic = TopicSpec(name="news", subscriptions=(SubscriptionSpec(name="a"),
                                                  SubscriptionSpec(name="b")))
    async with Emulator(
            {"primary": 0}, data_dir=tmp_path / "data",
            queues=["basic", "dlq", "defer", "rnd", "big", "sched",
                    QueueSpec(name="workflows", requires_session=True)],
            topics=[topic], event_hubs=[EventHubSpec(name="telemetry", partitions=2)]) as emu:
        yield emu


async def test_the_javascript_sdks_pass_every_check(emulator: Emulator) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the JavaScript SDKs run on Node.js)")
    if not (PREFIX / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.fail(f"the JavaScript SDKs are not installed in {PREFIX}: run the README's "
                    "test command")
    process = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), emulator.connection_string("primary"),
        env={**os.environ, "JSSDK_PREFIX": str(PREFIX)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(), 60)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail("the node script did not finish within 60 s")
    assert process.returncode == 0, err.decode() + out.decode()
    assert out.decode().strip() == "ok", err.decode()
    print(err.decode())  # the time each step took, shown with -s
