"""HTTP senders to a geo-redundant hybrid connection: the async driver, on httpx (asyncio).

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
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx
from tenacity import AsyncRetrying

from gateway.geo import GatewayHooks
from gateway.relay._core import BaseGeoRelayClient, Call, Retry, logger
from gateway.relay._policy import RelayClientPolicy
from gateway.relay.protocol import RelayEndpoint

__all__ = ["AsyncGeoRelayClient"]

_Outcome = httpx.Response | Exception


class _Race:
    """What runs beside one attempt once its deadline passed: a hedge (idempotent) or a
    probe. ``finish`` gives the attempt's outcome and, while the caller's task still
    waits for the first namespace, interrupts that wait by cancelling it."""

    def __init__(self, task: asyncio.Task[Any], *, idempotent: bool) -> None:
        self.task = task
        self.hedge = idempotent
        self.helper: asyncio.Task[None] | None = None
        self.interrupting = True  # the caller's task waits for the first namespace
        self.outcome: httpx.Response | Exception | None = None
        self._cancelled = False

    def finish(self, outcome: httpx.Response | Exception) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        if self.interrupting:
            self._cancelled = True
            self.task.cancel()

    def ours(self) -> bool:
        """Whether the caller's task was cancelled by ``finish`` alone (then taken back)."""
        if not self._cancelled:
            return False
        self._cancelled = False
        uncancel = getattr(self.task, "uncancel", None)  # Python 3.11+
        return uncancel is None or uncancel() == 0  # else the caller was cancelled too

    def result(self) -> httpx.Response:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        assert self.outcome is not None
        return self.outcome


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
        clock: the time of tokens' expiry and of role changes (tests pass a fake).
        transport: an httpx transport (tests, proxies); the default opens connections.
        sleep: how to wait between rounds (tests pass a recorder).

    Raises:
        ConfigError: an endpoint is not a :class:`RelayEndpoint`, both are in one
            namespace, or the persisted roles are unreadable.
    """

    def __init__(self, primary: RelayEndpoint, secondary: RelayEndpoint, *,
                 policy: RelayClientPolicy | None = None, hooks: Sequence[GatewayHooks] = (),
                 randomize: bool = True, rng: random.Random | None = None,
                 state_dir: str | Path | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        super().__init__(primary, secondary, policy=policy, hooks=hooks, randomize=randomize,
                         rng=rng, state_dir=state_dir, clock=clock)
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
        # The request runs in the caller's task (a task per request would cost a third
        # of the throughput at 16 concurrent requests); a timer starts the hedge or the
        # probe beside it, which interrupts it only when it has the outcome.
        namespace = call.next_namespace()
        task = asyncio.current_task()
        assert task is not None
        race = _Race(task, idempotent=call.idempotent)
        deadline = self._deadline(namespace)
        timer = asyncio.get_running_loop().call_later(deadline, self._late, call, namespace,
                                                      race, deadline)
        try:
            try:
                outcome = await self._exchange(call, namespace)
            except asyncio.CancelledError:
                if not race.ours():
                    raise
                return race.result()  # the hedge's answer, or the namespace hangs
            race.interrupting = False
            try:
                return self._settle(call, namespace, outcome)
            except Retry:
                if not race.hedge or race.helper is None:
                    raise
                await race.helper  # the other namespace may still answer
                if race.outcome is None:
                    raise
                return race.result()
        finally:
            timer.cancel()
            if race.helper is not None:
                race.helper.cancel()

    def _late(self, call: Call, namespace: str, race: _Race, deadline: float) -> None:
        """The deadline passed without an answer: hedge, or probe the namespace."""
        call.slow.add(namespace)
        loop = asyncio.get_running_loop()
        if race.hedge:
            other = call.next_namespace()
            logger.info("relay %s: no answer from %s in %.2f s; hedged to %s", call.method,
                        namespace, deadline, other)
            race.helper = loop.create_task(self._hedged(call, other, race))
        else:
            logger.info("relay %s: no answer from %s in %.2f s; probing it", call.method,
                        namespace, deadline)
            race.helper = loop.create_task(self._probe(call, namespace, race, deadline))

    async def _hedged(self, call: Call, namespace: str, race: _Race) -> None:
        try:
            response = self._settle(call, namespace, await self._exchange(call, namespace))
        except Retry:
            return  # the first attempt may still answer
        except Exception as exc:  # MessageRejected, or a bug: the request's error
            race.finish(exc)
            return
        race.finish(response)

    async def _probe(self, call: Call, namespace: str, race: _Race, deadline: float) -> None:
        try:
            alive = await asyncio.wait_for(self._alive(namespace), self.policy.probe_timeout)
        except asyncio.TimeoutError:
            alive = False
        if not alive:  # neither the request nor the probe answered: the namespace hangs
            race.finish(self._hung(call, namespace, deadline + self.policy.probe_timeout))

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
