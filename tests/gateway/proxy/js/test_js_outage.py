"""@azure/service-bus (Node.js) through a proxy while the primary namespace goes down
and comes back: every message received exactly once."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from gateway.proxy import Proxy
from gateway.transports import LocalNamespace
from tests.gateway.proxy.conftest import QUEUE

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = Path(__file__).with_name("outage_check.mjs")
PREFIX = ROOT / ".jssdk"
LIMIT = 90
COUNT = 30


async def test_the_js_sdk_receives_each_message_once_across_an_outage(
        proxy: Proxy, data_dir: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the JavaScript SDK runs on Node.js)")
    if not (PREFIX / "node_modules" / "@azure" / "service-bus").is_dir():
        pytest.skip("@azure/service-bus is not installed in .jssdk (see the README)")
    primary = LocalNamespace("primary", data_dir=data_dir)
    process = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), proxy.connection_string(), QUEUE, str(COUNT),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "JSSDK_PREFIX": str(PREFIX)})
    assert process.stdin and process.stdout and process.stderr
    err: list[str] = []
    result: list[str] = []

    async def read_err(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            err.append(line.decode().rstrip())

    async def drive(stream: asyncio.StreamReader) -> None:
        # The script asks for the outage and the recovery; the test makes them.
        async for raw in stream:
            line = raw.decode().strip()
            if line.startswith("control "):
                (primary.down if line == "control down" else primary.up)()
                await asyncio.sleep(0.3)
                process.stdin.write(b"done\n")  # type: ignore[union-attr]
                await process.stdin.drain()  # type: ignore[union-attr]
            elif line:
                result.append(line)

    stalled = False
    try:
        await asyncio.wait_for(asyncio.gather(
            drive(process.stdout), read_err(process.stderr), process.wait()), LIMIT)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        stalled = True
    if stalled:
        steps = [line.removeprefix("step ") for line in err if line.startswith("step ")]
        pytest.fail(f"{SCRIPT.name} did not finish within {LIMIT} s; its last step: "
                    f"{steps[-1] if steps else 'none'}\n" + "\n".join(err[-10:]))
    assert process.returncode == 0, "\n".join(err[-20:])
    # Every message sent was received, none twice
    assert result == [f"ok {COUNT} {COUNT} 0"], (result, err[-5:])
