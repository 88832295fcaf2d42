"""``GeoRelayClient``: the blocking relay client, a thin driver over the async one.

Every decision (failover, hedging, probes, roles) is made once, in
:class:`~gateway.relay.AsyncGeoRelayClient`; this class runs it on a private event
loop thread (:mod:`gateway._support.portal`, as ``GeoSender`` does), started on the
first request, and blocks on each call. Hedging needs that: a blocking httpx call
cannot be abandoned when the other namespace answered first.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import httpx

from gateway._support.portal import PortalDriver
from gateway.relay._client import AsyncGeoRelayClient
from gateway.relay._policy import RelayClientPolicy
from gateway.relay.protocol import RelayEndpoint
from replication import RoleState

__all__ = ["GeoRelayClient"]


class _Portal(PortalDriver):
    """The loop thread that runs one async client."""

    def __init__(self, client: AsyncGeoRelayClient) -> None:
        self._client = client
        super().__init__()

    def run(self, call: Callable[[], Any]) -> Any:
        return self._call(call)

    def close(self) -> None:
        self._close_portal(self._client.aclose)


class GeoRelayClient:
    """The blocking twin of :class:`AsyncGeoRelayClient` (same arguments, ``close()``).

    ``transport`` is an ``httpx.BaseTransport`` (one that is also an async transport,
    as ``httpx.MockTransport`` is, is used as such; a sync-only one runs in a worker
    thread); ``sleep`` a plain function.
    """

    def __init__(self, primary: RelayEndpoint, secondary: RelayEndpoint, *,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] | None = None, **options: Any) -> None:
        async def wait(seconds: float) -> None:
            assert sleep is not None
            sleep(seconds)

        self._client = AsyncGeoRelayClient(
            primary, secondary, transport=None if transport is None else _async(transport),
            sleep=None if sleep is None else wait, **options)
        self._portal: _Portal | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return repr(self._client).replace("AsyncGeoRelayClient", "GeoRelayClient", 1)

    def __enter__(self) -> GeoRelayClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def policy(self) -> RelayClientPolicy:
        """The client's timeouts, deadlines and retries."""
        return self._client.policy

    @property
    def roles(self) -> RoleState:
        """Which namespace takes requests now (``roles.active``) and which is standby."""
        return self._client.roles

    @property
    def active(self) -> RelayEndpoint:
        """The endpoint requests go to first."""
        return self._client.active

    def close(self) -> None:
        """Close the connections (and the loop thread). Safe to call twice."""
        with self._lock:
            self._closed = True
            portal, self._portal = self._portal, None
        if portal is not None:
            portal.close()

    def request(self, method: str, path: str = "", *, content: bytes | str | None = None,
                json: Any = None, params: Any = None, headers: Mapping[str, str] | None = None,
                idempotent: bool | None = None) -> httpx.Response:
        """Send a request, failing over; see :meth:`AsyncGeoRelayClient.request`."""
        result: httpx.Response = self._run(functools.partial(
            self._client.request, method, path, content=content, json=json, params=params,
            headers=headers, idempotent=idempotent))
        return result

    def get(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return self.request("GET", path, **kwargs)

    def post(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``: not sent twice unless ``idempotent=True``."""
        return self.request("POST", path, **kwargs)

    def put(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return self.request("DELETE", path, **kwargs)

    def _run(self, call: Callable[[], Any]) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("this GeoRelayClient is closed")
            if self._portal is None:  # the loop thread starts with the first request
                self._portal = _Portal(self._client)
            portal = self._portal
        return portal.run(call)


def _async(transport: httpx.BaseTransport) -> httpx.AsyncBaseTransport:
    if isinstance(transport, httpx.AsyncBaseTransport):
        return transport
    return _ThreadedTransport(transport)


class _ThreadedTransport(httpx.AsyncBaseTransport):
    """A sync httpx transport, each request sent (and read) in a worker thread."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        def send() -> httpx.Response:
            response = self._transport.handle_request(request)
            try:
                content = response.read()
            finally:
                response.close()
            return httpx.Response(response.status_code, headers=response.headers,
                                  content=content, extensions={
                                      k: v for k, v in response.extensions.items()
                                      if k in ("http_version", "reason_phrase")})

        # run_in_executor: a hedge's loser may be abandoned while its thread finishes.
        return await asyncio.get_running_loop().run_in_executor(None, send)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._transport.close)
