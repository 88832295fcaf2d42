"""GeoRelayClient against real Azure Relay: runs only when ``GEOGATEWAY_LIVE_RELAY`` is set.

``GEOGATEWAY_LIVE_RELAY`` is a hybrid connection's connection string (with
``EntityPath``) whose policy has Listen and Send rights. The other namespace is one
that does not exist, so the failover is from a real DNS failure.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from gateway.errors import MessageRejected
from gateway.relay import (
    AsyncGeoRelayClient,
    GeoRelayListener,
    RelayEndpoint,
    RelayRequest,
    RelayResponse,
)

pytestmark = [pytest.mark.azure, pytest.mark.anyio]

MISSING = "geogateway-no-such-namespace-7f3a.servicebus.windows.net"


def live_endpoint() -> RelayEndpoint:
    conn = os.environ.get("GEOGATEWAY_LIVE_RELAY")
    if not conn:
        pytest.skip("live Azure test: set GEOGATEWAY_LIVE_RELAY to run it")
    return RelayEndpoint.from_connection_string(conn)


async def echo(request: RelayRequest) -> RelayResponse:
    return RelayResponse(body=request.body)


async def test_a_missing_namespace_fails_over_to_azure_relay() -> None:
    live = live_endpoint()
    missing = replace(live, namespace=MISSING)
    async with GeoRelayListener([live], echo) as listener, \
            AsyncGeoRelayClient(missing, live, randomize=False) as client:
        await listener.wait_connected(timeout=60)
        r = await client.post("/live", content=b"x" * (100 * 1024))  # DNS: nothing sent
        assert (r.status_code, len(r.content)) == (200, 100 * 1024)
        assert "via" in r.headers and client.roles.active == live.namespace


async def test_azure_relay_refuses_a_bad_key_and_it_is_not_failed_over() -> None:
    live = live_endpoint()
    wrong = replace(live, key="d3Jvbmcta2V5")
    async with AsyncGeoRelayClient(wrong, replace(wrong, namespace=MISSING),
                                   randomize=False) as client:
        with pytest.raises(MessageRejected):
            await client.get("/live")
