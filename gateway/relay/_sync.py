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
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from gateway._support.portal import PortalDriver, twin_arguments
from gateway.geo import GatewayHooks
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
    """The blocking twin of :class:`AsyncGeoRelayClient`; close it with ``close()``.

    Args:
        primary: one namespace's hybrid connection.
        secondary: the other namespace's.
        policy: timeouts, deadlines, retries and token lifetime (:class:`RelayClientPolicy`).
        hooks: :class:`GatewayHooks`; ``on_failover`` is called when roles swap.
        randomize: pick the primary at random from the two (the outage guidance's
            advice, which spreads senders over both namespaces); False keeps the order.
        rng: the random source for that pick (seed it for repeatable tests).
        state_dir: persist roles there, so that a restarted client keeps its active
            namespace; ``None`` keeps them in memory.
        clock: the time of tokens' expiry and of role changes (tests pass a fake).
        transport: an ``httpx.BaseTransport`` (tests, proxies): one that is also an
            async transport, as ``httpx.MockTransport`` is, is used as such; a
            sync-only one runs in a worker thread. The default opens connections.
        sleep: how to wait between rounds, a plain function (tests pass a recorder).

    Raises:
        ConfigError: an endpoint is not a :class:`RelayEndpoint`, both are in one
            namespace, or the persisted roles are unreadable.
    """

    def __init__(self, primary: RelayEndpoint, secondary: RelayEndpoint, *,
                 policy: RelayClientPolicy | None = None, hooks: Sequence[GatewayHooks] = (),
                 randomize: bool = True, rng: random.Random | None = None,
                 state_dir: str | Path | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        async def wait(seconds: float) -> None:
            assert sleep is not None
            sleep(seconds)

        kwargs = twin_arguments(AsyncGeoRelayClient, locals())
        kwargs["transport"] = None if transport is None else _async(transport)
        kwargs["sleep"] = None if sleep is None else wait
        self._client = AsyncGeoRelayClient(**kwargs)
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
