"""The listener against real Azure Relay: runs only when these variables are set.

- ``GEOGATEWAY_LIVE_RELAY``: a connection string of a hybrid connection (with
  ``EntityPath``) whose policy has Listen and Send rights;
- ``GEOGATEWAY_LIVE_RELAY_SECONDARY`` (optional): the same in a second namespace.
"""

from __future__ import annotations

import os

import httpx
import pytest

from gateway.relay import GeoRelayListener, RelayEndpoint, RelayRequest, RelayResponse

pytestmark = [pytest.mark.azure, pytest.mark.anyio]


def live_endpoints() -> list[RelayEndpoint]:
    names = ["GEOGATEWAY_LIVE_RELAY", "GEOGATEWAY_LIVE_RELAY_SECONDARY"]
    found = [os.environ[n] for n in names if os.environ.get(n)]
    if not os.environ.get(names[0]):
        pytest.skip("live Azure test: set GEOGATEWAY_LIVE_RELAY to run it")
    return [RelayEndpoint.from_connection_string(c) for c in found]


async def echo(request: RelayRequest) -> RelayResponse:
    return RelayResponse(body=request.body, headers={"X-Method": request.method})


async def test_requests_through_azure_relay_inline_and_by_rendezvous() -> None:
    endpoints = live_endpoints()
    async with GeoRelayListener(endpoints, echo) as listener, \
            httpx.AsyncClient(timeout=60) as client:
        await listener.wait_connected(timeout=60)
        for ep in endpoints:
            for body in (b"small", b"x" * (200 * 1024)):
                r = await client.post(ep.http_url("/live"), content=body,
                                      headers={"ServiceBusAuthorization": ep.token()})
                assert (r.status_code, r.content) == (200, body)
                assert r.headers["x-method"] == "POST"
