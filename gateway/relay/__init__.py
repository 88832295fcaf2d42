"""Geo-redundant relay endpoints over Azure Relay Hybrid Connections.

A service listens on one hybrid connection in each of two namespaces
(:class:`GeoRelayListener`); senders pick one at random and fail over to the other.
:class:`RelayEmulator` serves the Hybrid Connections protocol on loopback for tests,
drills and local development.

The listener and the emulator import aiohttp, the clients httpx and tenacity; they are
loaded on first use, so that ``import gateway.relay`` (and the CLI) stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway._support.lazy import lazy_exports as _lazy_exports
from gateway.relay._handler import (
    AsgiApp,
    Handler,
    RelayRequest,
    RelayResponse,
    asgi_handler,
)
from gateway.relay.protocol import (
    Accept,
    ProtocolError,
    RelayEndpoint,
    RemoteEndpoint,
    RenewToken,
    Request,
    Response,
    create_token,
)

if TYPE_CHECKING:
    from gateway.emulator import RelayEmulator
    from gateway.relay._client import AsyncGeoRelayClient
    from gateway.relay._listener import GeoRelayListener
    from gateway.relay._policy import RelayClientPolicy
    from gateway.relay._serving import WebSocketHandler
    from gateway.relay._sync import GeoRelayClient
    from gateway.relay._thread import RelayThread

__all__ = [
    "Accept",
    "AsgiApp",
    "AsyncGeoRelayClient",
    "GeoRelayClient",
    "GeoRelayListener",
    "Handler",
    "ProtocolError",
    "RelayClientPolicy",
    "RelayEmulator",
    "RelayEndpoint",
    "RelayRequest",
    "RelayResponse",
    "RelayThread",
    "RemoteEndpoint",
    "RenewToken",
    "Request",
    "Response",
    "WebSocketHandler",
    "asgi_handler",
    "create_token",
]

_LAZY = {"AsyncGeoRelayClient": "gateway.relay._client",
         "GeoRelayClient": "gateway.relay._sync",
         "RelayClientPolicy": "gateway.relay._policy",
         "GeoRelayListener": "gateway.relay._listener",
         "WebSocketHandler": "gateway.relay._serving",
         "RelayEmulator": "gateway.emulator",
         "RelayThread": "gateway.relay._thread"}


__getattr__ = _lazy_exports(__name__, _LAZY)
