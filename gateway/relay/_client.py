"""HTTP senders to a geo-redundant hybrid connection: the async driver, on httpx.

The decisions (what an outcome means, roles, tokens, deadlines) are in ``_core.py``;
this module sends, races and waits. Each attempt runs against a deadline (see
:class:`~gateway.relay.RelayClientPolicy`): a namespace that has not answered by then
may hang, so an idempotent request is *hedged* (sent to the other namespace too; the
first answer wins and the other attempt is dropped) and a non-idempotent one has its
namespace *probed* (a request the relay answers itself): a namespace that answers
the probe is alive and its listener slow, so the request goes on waiting; one that
does not hangs, and the request ends in ``OperationTimeout`` without being sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
import httpx
from tenacity import AsyncRetrying

from gateway.relay._core import BaseGeoRelayClient, Call, Retry, logger
from gateway.relay.protocol import RelayEndpoint

__all__ = ["AsyncGeoRelayClient"]

_Outcome = httpx.Response | Exception


class AsyncGeoRelayClient(BaseGeoRelayClient):
    """Sends HTTP requests to a hybrid connection in two namespaces, failing over between them.

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
        transport: an httpx transport (tests, proxies); the default opens connections.
        sleep: how to wait between rounds (tests pass a recorder).

    Raises:
        ConfigError: an endpoint is not a :class:`RelayEndpoint`, both are in one
            namespace, or the persisted roles are unreadable.
    """

    def __init__(self, primary: RelayEndpoint, secondary: RelayEndpoint, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None,
                 **options: Any) -> None:
        super().__init__(primary, secondary, **options)
        self._http = httpx.AsyncClient(transport=transport, timeout=self.policy.timeout)
        self._retrying = AsyncRetrying(sleep=sleep or anyio.sleep, **self._retry_args)

    async def __aenter__(self) -> AsyncGeoRelayClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def request(self, method: str, path: str = "", *, content: bytes | str | None = None,
                      json: Any = None, params: Any = None,
                      headers: Mapping[str, str] | None = None,
                      idempotent: bool | None = None) -> httpx.Response:
        """Send a request to the active namespace, failing over to the other.

        Args:
            method: the HTTP method.
            path: the target below the hybrid connection, e.g. ``"/orders/1?x=y"``.
            content: the body (bytes or str; a failover sends it again).
            json: a body to send as JSON instead.
            params: query parameters.
            headers: request headers (the token header is added).
            idempotent: whether the request may be sent twice when its outcome is
                unknown; ``None`` decides by method (GET, HEAD, PUT, DELETE, OPTIONS).
                An idempotent request whose namespace has not answered within its
                deadline is also sent to the other namespace (hedged).

        Returns:
            The listener's response, whatever its status (it has a ``Via`` header),
            or a response the relay made that says nothing about the namespace (400, 413).

        Raises:
            NamespaceUnavailable: neither namespace could take the request.
            OperationTimeout: the outcome is unknown and the request is not idempotent
                (the listener went away or did not answer, or the namespace hangs), or
                no namespace answered an idempotent one in time.
            MessageRejected: the relay refused the token (401/403), or the hybrid
                connection exists in neither namespace (404 from both): never retried.
        """
        call = self._begin(method, path, content=content, json=json, params=params,
                           headers=headers, idempotent=idempotent)
        try:
            return await self._attempt(call)  # most requests end here, without tenacity
        except Retry:
            pass
        try:
            # A copy per request: a tenacity object keeps its state for one call at a time.
            return await self._retrying.copy()(self._attempt, call)
        except Exception as exc:
            self._give_up(call, exc)

    async def _attempt(self, call: Call) -> httpx.Response:
        namespace = call.next_namespace()
        first = asyncio.ensure_future(self._exchange(call, namespace))
        try:
            deadline = self._deadline(namespace)
            done, _ = await asyncio.wait((first,), timeout=deadline)
            if done:  # most requests
                return self._settle(call, namespace, first.result())
            call.slow.add(namespace)
            if call.idempotent:
                return await self._hedge(call, namespace, first, deadline)
            return await self._probe(call, namespace, first, deadline)
        finally:
            first.cancel()  # a request still in flight (a hedge won, or the caller left)

    async def _exchange(self, call: Call, namespace: str) -> _Outcome:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            response = await self._http.send(self._build(call, namespace))
        except httpx.HTTPError as exc:
            return exc
        if "via" in response.headers:  # a listener's answer: how long this namespace takes
            self._observe(namespace, loop.time() - started)
        return response

    async def _hedge(self, call: Call, namespace: str, first: asyncio.Future[_Outcome],
                     deadline: float) -> httpx.Response:
        other = call.next_namespace()
        logger.info("relay %s: no answer from %s in %.2f s; hedged to %s", call.method,
                    namespace, deadline, other)
        racing = {first: namespace, asyncio.ensure_future(self._exchange(call, other)): other}
        error: Exception | None = None
        try:
            while racing:
                done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    try:  # the first answer wins; a failure waits for the other
                        return self._settle(call, racing.pop(task), task.result())
                    except Retry as exc:
                        error = exc
            assert error is not None
            raise error
        finally:
            for task in racing:
                task.cancel()

    async def _probe(self, call: Call, namespace: str, first: asyncio.Future[_Outcome],
                     deadline: float) -> httpx.Response:
        logger.info("relay %s: no answer from %s in %.2f s; probing it", call.method,
                    namespace, deadline)
        probe = asyncio.ensure_future(self._alive(namespace))
        try:
            done, _ = await asyncio.wait((first, probe), timeout=self.policy.probe_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if first in done or (probe in done and probe.result()):
                # Answered, or alive (the relay answers: its listener is slow): wait on.
                return self._settle(call, namespace, await first)
        finally:
            probe.cancel()
        self._hung(call, namespace, deadline + self.policy.probe_timeout)

    async def _alive(self, namespace: str) -> bool:
        try:
            await self._http.send(self._probe_request(namespace))
        except httpx.HTTPError:
            return False
        return True

    async def get(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("GET", path, ...)``."""
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("POST", path, ...)``: not sent twice unless ``idempotent=True``."""
        return await self.request("POST", path, **kwargs)

    async def put(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("PUT", path, ...)``."""
        return await self.request("PUT", path, **kwargs)

    async def delete(self, path: str = "", **kwargs: Any) -> httpx.Response:
        """``request("DELETE", path, ...)``."""
        return await self.request("DELETE", path, **kwargs)
