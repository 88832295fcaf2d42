"""A relay listener in its own process, for crash tests: ``python listener_child.py
MARKER CONN_STRING...``. It answers "child"; on ``/slow`` it touches MARKER and hangs."""

from __future__ import annotations

import asyncio
import pathlib
import sys

from gateway.relay import GeoRelayListener, RelayEndpoint, RelayRequest, RelayResponse


async def handler(request: RelayRequest) -> RelayResponse:
    if request.target.endswith("/slow"):
        pathlib.Path(sys.argv[1]).touch()  # noqa: ASYNC240 - a test marker, once
        await asyncio.sleep(3600)
    return RelayResponse(body=b"child")


if __name__ == "__main__":
    endpoints = [RelayEndpoint.from_connection_string(c) for c in sys.argv[2:]]
    GeoRelayListener(endpoints, handler).run()
