"""Sync use: the emulator and a listener in background threads, a blocking httpx sender."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.relay import (
    GeoRelayListener,
    RelayEmulator,
    RelayRequest,
    RelayResponse,
    RelayThread,
)

from .conftest import HC


async def hello(request: RelayRequest) -> RelayResponse:
    return RelayResponse(body=b"hello " + request.body)


def test_emulator_and_listener_in_threads_serve_a_blocking_client(tmp_path: Path) -> None:
    with RelayThread(RelayEmulator({"primary": 0}, [HC], data_dir=tmp_path)) as emu:
        ep = emu.endpoint("primary", HC)
        listener_thread = RelayThread(GeoRelayListener([ep], hello))
        with listener_thread as listener:
            listener_thread.call(listener.wait_connected(), timeout=10)
            r = httpx.post(ep.http_url(), content=b"sync",
                           headers={"ServiceBusAuthorization": ep.token()}, timeout=10)
        assert (r.status_code, r.content) == (200, b"hello sync")
        after = httpx.get(ep.http_url(), headers={"ServiceBusAuthorization": ep.token()})
    assert after.status_code == 502  # the listener stopped with its thread
