"""The unmodified JavaScript SDKs (@azure/service-bus, @azure/event-hubs) against the emulator.

The README's test command installs them from the npm registry into ``.jssdk/``. The node
scripts beside this file run their checks and exit non-zero with a message on the first
SDK error, differing result or step that stalls: ``servicebus_check.mjs`` every feature,
``rights_check.mjs`` keys with limited rights (the tokens the SDKs put for an entity, its
``$management`` node, a sub-queue, a subscription, an event hub's partitions).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.emulator import (
    Emulator,
    EventHubSpec,
    QueueSpec,
    SubscriptionSpec,
    TopicSpec,
    parse_policy,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).parent
PREFIX = ROOT / ".jssdk"
#: The whole script's limit (it takes about 10 s; each step stops itself after 20 s).
LIMIT = 120


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


@pytest.fixture
async def limited(tmp_path: Path) -> AsyncIterator[Emulator]:
    """An emulator whose policies are Listen only, Send only and Send+Listen on ``basic``."""
    key = "a2V5"
    topic = TopicSpec(name="news", subscriptions=(SubscriptionSpec(name="a"),))
    async with Emulator(
            {"primary": 0}, data_dir=tmp_path / "data",
            queues=["basic", "dlq", QueueSpec(name="workflows", requires_session=True)],
            topics=[topic], event_hubs=[EventHubSpec(name="telemetry", partitions=2)],
            policies=[parse_policy(f"listener={key}:Listen"),
                      parse_policy(f"sender={key}:Send"),
                      parse_policy(f"basic/owner={key}:Send,Listen")]) as emu:
        yield emu


async def run_script(script: str, argument: str) -> list[str]:
    """Run ``script`` with ``argument``; its stderr lines. Fails the test on a non-zero
    exit or when it runs longer than LIMIT (naming the last step it began)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the JavaScript SDKs run on Node.js)")
    if not (PREFIX / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.fail(f"the JavaScript SDKs are not installed in {PREFIX}: run the README's "
                    "test command")
    process = await asyncio.create_subprocess_exec(
        node, str(HERE / script), argument, env={**os.environ, "JSSDK_PREFIX": str(PREFIX)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    err: list[str] = []  # read as it comes: a script that stalls still shows its last step

    async def read_err(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            err.append(line.decode().rstrip())

    out, stalled = b"", False
    try:
        out, _, _ = await asyncio.wait_for(asyncio.gather(
            process.stdout.read(), read_err(process.stderr), process.wait()), LIMIT)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        stalled = True
    if stalled:  # failed out of the except block: no cancellation traceback before it
        steps = [line.removeprefix("step ") for line in err if line.startswith("step ")]
        pytest.fail(f"{script} did not finish within {LIMIT} s; its last step: "
                    f"{steps[-1] if steps else 'none'}\n" + "\n".join(err[-20:]))
    assert process.returncode == 0, "\n".join(err) + out.decode()
    assert out.decode().strip() == "ok", "\n".join(err)
    return err


async def test_the_javascript_sdks_pass_every_check(emulator: Emulator) -> None:
    err = await run_script("servicebus_check.mjs", emulator.connection_string("primary"))
    print(err[-1])  # the time each step took, shown with -s


async def test_the_javascript_sdks_get_what_each_keys_rights_allow(limited: Emulator) -> None:
    # The entity-level key without its EntityPath: the SDK would refuse another entity
    # itself, and the emulator's refusal is what is checked.
    strings = {kind: limited.connection_string("primary", policy=policy)
               .replace("EntityPath=basic;", "")
               for kind, policy in [("listen", "listener"), ("send", "sender"),
                                    ("manage", None), ("entity", "owner")]}
    await run_script("rights_check.mjs", json.dumps(strings))
