"""A relay listener in its own process, for crash tests: ``python listener_child.py
MARKER CONN_STRING...``. It answers "child"; on a target ending in ``/slow`` it appends
a line (``child METHOD TARGET``) to MARKER, which counts the requests it executed,
and hangs."""

from __future__ import annotations

import asyncio
import pathlib
import sys

from gateway.relay import GeoRelayListener, RelayEndpoint, RelayRequest, RelayResponse


async def handler(request: RelayRequest) -> RelayResponse:
    if request.target.endswith("/slow"):
        with pathlib.Path(sys.argv[1]).open("a") as marker:  # noqa: ASYNC230 - one line
            marker.write(f"child {request.method} {request.target}\n")
        await asyncio.sleep(3600)
    return RelayResponse(body=b"child")


if __name__ == "__main__":
    endpoints = [RelayEndpoint.from_connection_string(c) for c in sys.argv[2:]]
    GeoRelayListener(endpoints, handler).run()
