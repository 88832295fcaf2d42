"""Geo-redundant relay endpoints over Azure Relay Hybrid Connections.

A service listens on one hybrid connection in each of two namespaces
(:class:`GeoRelayListener`); senders pick one at random and fail over to the other.
:class:`RelayEmulator` serves the Hybrid Connections protocol on loopback for tests,
drills and local development.
"""

from gateway.relay._client import AsyncGeoRelayClient, GeoRelayClient
from gateway.relay._policy import RelayClientPolicy
from gateway.relay._protocol import (
    Accept,
    ProtocolError,
    RelayEndpoint,
    RemoteEndpoint,
    RenewToken,
    Request,
    Response,
    create_token,
)

__all__ = [
    "Accept",
    "AsyncGeoRelayClient",
    "GeoRelayClient",
    "ProtocolError",
    "RelayClientPolicy",
    "RelayEndpoint",
    "RemoteEndpoint",
    "RenewToken",
    "Request",
    "Response",
    "create_token",
]
