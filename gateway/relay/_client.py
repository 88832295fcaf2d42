"""HTTP senders to a geo-redundant hybrid connection: one core, an async and a sync driver.

The service listens on the same hybrid connection in two namespaces. The client
picks one at random as its primary, sends there, and on an error that means the
namespace is unavailable sends to the other and swaps roles (the Service Bus
outage guidance for relay endpoints). What counts as such an error is decided in
``_policy.py``; this module builds the requests, keeps the tokens and roles, and
drives the attempts with tenacity.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import anyio
import httpx
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
)

from gateway.geo import GatewayHooks, emit
from gateway.relay._policy import (
    RelayClientPolicy,
    TokenCache,
    Verdict,
    classify_error,
    classify_response,
    is_idempotent,
    round_wait,
)
from gateway.relay.protocol import RelayEndpoint
from gateway.stores import RoleStore
from replication import (
    ANY_NAMESPACE,
    ConfigError,
    MessageRejected,
    NamespaceUnavailable,
    OperationTimeout,
    RoleState,
)

__all__ = ["AsyncGeoRelayClient", "GeoRelayClient"]

logger = logging.getLogger("geogateway.relay")

#: The header that carries the SAS token to the relay (the Service Bus name).
AUTH_HEADER = "ServiceBusAuthorization"


class _Retry(NamespaceUnavailable):
    """One attempt failed in a way that allows the next (internal: never escapes)."""


@dataclass
class _Call:
    """One request across its attempts: what to send, where, and what went wrong."""

    method: str
    target: str
    idempotent: bool
    order: tuple[str, str]
    content: bytes | str | None = None
    json: Any = None
    params: Any = None
    headers: Mapping[str, str] | None = None
    attempts: int = 0
    failures: list[tuple[str, Verdict, str]] = field(default_factory=list)

    def next_namespace(self) -> str:
        namespace = self.order[self.attempts % 2]
        self.attempts += 1
        return namespace


class _BaseGeoRelayClient:
    """The shared core: endpoints, roles, tokens, and the verdict on each attempt."""

    def __init__(
        self,
        primary: RelayEndpoint,
        secondary: RelayEndpoint,
        *,
        policy: RelayClientPolicy | None = None,
        hooks: Sequence[GatewayHooks] = (),
        randomize: bool = True,
        rng: random.Random | None = None,
        state_dir: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        for name, ep in (("primary", primary), ("secondary", secondary)):
            if not isinstance(ep, RelayEndpoint):
                raise ConfigError(f"relay client: {name} must be a RelayEndpoint, e.g. "
                                  "RelayEndpoint.from_connection_string(...)")
        if primary.namespace.lower() == secondary.namespace.lower():
            raise ConfigError(f"relay client: primary and secondary are both in namespace "
                              f"{primary.namespace!r}; give hybrid connections in two namespaces")
        self.policy = policy or RelayClientPolicy()
        if randomize and (rng or random.Random()).random() < 0.5:
            primary, secondary = secondary, primary
        self._endpoints = {primary.namespace: primary, secondary.namespace: secondary}
        self._hooks = tuple(hooks)
        self._clock = clock
        self._store: RoleStore | None = None
        if state_dir is not None:
            self._store = RoleStore(Path(state_dir) / _roles_file(primary, secondary))
            self._roles = self._store.load(primary.namespace, secondary.namespace)
        else:
            self._roles = RoleState.initial(primary.namespace, secondary.namespace)
        self._tokens = {ns: TokenCache(ttl=self.policy.token_ttl,
                                       renew_before=self.policy.token_renew_before)
                        for ns in self._endpoints}
        self._timeout = self.policy.timeout.as_dict()
        retry = self.policy.retry
        self._retry_args: dict[str, Any] = {
            # The first attempt is the driver's; tenacity makes the rest of the rounds.
            "stop": stop_after_attempt(2 * retry.attempts - 1) | stop_after_delay(retry.max_delay),
            "wait": round_wait(retry),
            "retry": retry_if_exception_type(_Retry),
            "reraise": True,
        }

    def __repr__(self) -> str:
        active, standby = (self._endpoints[ns] for ns in self._roles.order)
        return (f"{type(self).__name__}(active={active.namespace}/{active.path}, "
                f"standby={standby.namespace}/{standby.path})")

    @property
    def roles(self) -> RoleState:
        """Which namespace takes requests now (``roles.active``) and which is standby."""
        return self._roles

    @property
    def active(self) -> RelayEndpoint:
        """The endpoint requests go to first."""
        return self._endpoints[self._roles.active]

    def _begin(self, method: str, path: str, *, content: bytes | str | None, json: Any,
               params: Any, headers: Mapping[str, str] | None,
               idempotent: bool | None) -> _Call:
        if not isinstance(method, str) or not method.isalpha():
            raise ValueError(f"relay request: bad HTTP method {method!r}")
        if content is not None and not isinstance(content, (bytes, str)):
            # A stream cannot be sent a second time to the other namespace.
            raise TypeError("relay request: content must be bytes or str (read a stream "
                            "into memory first: a failover sends it again)")
        return _Call(method=method.upper(), target=path, idempotent=is_idempotent(
            method, idempotent), order=self._roles.order, content=content, json=json,
            params=params, headers=headers)

    def _build(self, call: _Call, namespace: str) -> httpx.Request:
        endpoint = self._endpoints[namespace]
        token = self._tokens[namespace].get(
            self._clock(), lambda now: endpoint.token(ttl=self.policy.token_ttl, now=now))
        headers: httpx.Headers | dict[str, str]
        if call.headers:
            headers = httpx.Headers(call.headers)
            headers[AUTH_HEADER] = token  # replaces one the caller gave, in any case
        else:
            headers = {AUTH_HEADER: token}
        return httpx.Request(call.method, endpoint.http_url(call.target), params=call.params,
                             headers=headers, content=call.content, json=call.json,
                             extensions={"timeout": self._timeout})

    def _settle(self, call: _Call, namespace: str,
                outcome: httpx.Response | Exception) -> httpx.Response:
        """The response to return, or the error of this attempt (``_Retry`` to go on)."""
        if isinstance(outcome, httpx.Response):
            verdict = classify_response(outcome.status_code, via="via" in outcome.headers)
            if verdict is Verdict.ANSWERED:  # most requests: nothing more to build
                self._answered(call, namespace)
                return outcome
            reason = f"{outcome.status_code} {outcome.reason_phrase} from the relay"
        else:
            verdict = classify_error(outcome)
            if verdict is Verdict.RAISE:
                raise outcome
            reason = f"{type(outcome).__name__}: {outcome}".rstrip(": ")
        call.failures.append((namespace, verdict, reason))
        logger.info("relay %s %s: %s via %s", call.method, verdict.value, reason, namespace)
        if verdict is Verdict.REJECTED:
            raise MessageRejected(
                f"relay namespace {namespace} refused the request ({reason}): check the "
                "shared access key name and key, and that the policy has the Send right")
        if verdict is Verdict.UNKNOWN and not call.idempotent:
            raise OperationTimeout(
                f"relay {call.method} to {namespace}: outcome unknown ({reason}); not sent "
                "again because the method is not idempotent (pass idempotent=True if "
                "it is)", namespace=namespace)
        raise _Retry(reason, namespace=namespace)

    def _answered(self, call: _Call, namespace: str) -> None:
        # Swap roles only when this request saw the active namespace fail: a slow
        # request that the old primary answers must not swap them back.
        active = self._roles.active
        if namespace == active or not any(ns == active for ns, _, _ in call.failures):
            return
        before, self._roles = self._roles, self._roles.swap(self._clock())
        if self._store is not None:
            try:
                self._store.save(self._roles)
            except OSError:
                logger.exception("relay roles could not be saved to %s", self._store.path)
        logger.warning("relay failover: %s -> %s", before.active, self._roles.active)
        emit(self._hooks, "on_failover", from_namespace=before.active,
             to_namespace=self._roles.active, at=self._roles.changed_at)

    def _give_up(self, call: _Call, last: Exception) -> NoReturn:
        if not isinstance(last, _Retry):
            raise last
        tried = "; ".join(f"{ns}: {reason}" for ns, _, reason in call.failures)
        if any(verdict is Verdict.UNKNOWN for _, verdict, _ in call.failures):
            raise OperationTimeout(f"relay {call.method}: no answer, outcome unknown after "
                                   f"{call.attempts} attempts ({tried})",
                                   namespace=ANY_NAMESPACE) from None
        raise NamespaceUnavailable(f"relay {call.method}: both namespaces are unavailable "
                                   f"({tried})", namespace=ANY_NAMESPACE) from None


def _roles_file(*endpoints: RelayEndpoint) -> str:
    # The same file whichever of the two the random pick made primary.
    names = sorted(f"{ep.namespace}-{ep.path}" for ep in endpoints)
    safe = ["".join(c if c.isalnum() or c in ".-" else "_" for c in n) for n in names]
    return f"relay-roles-{safe[0]}-{safe[1]}.json"


class AsyncGeoRelayClient(_BaseGeoRelayClient):
    """Sends HTTP requests to a hybrid connection in two namespaces, failing over between them.

    Args:
        primary: one namespace's hybrid connection.
        secondary: the other namespace's.
        policy: timeouts, retries and token lifetime (:class:`RelayClientPolicy`).
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

        Returns:
            The listener's response, whatever its status (it has a ``Via`` header),
            or a response the relay made that says nothing about the namespace (400, 413).

        Raises:
            NamespaceUnavailable: neither namespace could take the request.
            OperationTimeout: the outcome is unknown and the request is not idempotent,
                or no namespace answered an idempotent one in time.
            MessageRejected: the relay refused the token (401/403): never failed over.
        """
        call = self._begin(method, path, content=content, json=json, params=params,
                           headers=headers, idempotent=idempotent)
        try:
            return await self._attempt(call)  # most requests end here, without tenacity
        except _Retry:
            pass
        try:
            # A copy per request: a tenacity object keeps its state for one call at a time.
            return await self._retrying.copy()(self._attempt, call)
        except Exception as exc:
            self._give_up(call, exc)

    async def _attempt(self, call: _Call) -> httpx.Response:
        namespace = call.next_namespace()
        try:
            response = await self._http.send(self._build(call, namespace))
        except httpx.HTTPError as exc:
            return self._settle(call, namespace, exc)
        return self._settle(call, namespace, response)

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


class GeoRelayClient(_BaseGeoRelayClient):
    """The blocking twin of :class:`AsyncGeoRelayClient` (same arguments, ``close()``).

    ``transport`` is an ``httpx.BaseTransport``; ``sleep`` a plain function.
    """

    def __init__(self, primary: RelayEndpoint, secondary: RelayEndpoint, *,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] | None = None, **options: Any) -> None:
        super().__init__(primary, secondary, **options)
        self._http = httpx.Client(transport=transport, timeout=self.policy.timeout)
        self._retrying = Retrying(sleep=sleep or time.sleep, **self._retry_args)

    def __enter__(self) -> GeoRelayClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def request(self, method: str, path: str = "", *, content: bytes | str | None = None,
                json: Any = None, params: Any = None, headers: Mapping[str, str] | None = None,
                idempotent: bool | None = None) -> httpx.Response:
        """Send a request, failing over; see :meth:`AsyncGeoRelayClient.request`."""
        call = self._begin(method, path, content=content, json=json, params=params,
                           headers=headers, idempotent=idempotent)
        try:
            return self._attempt(call)
        except _Retry:
            pass
        try:
            return self._retrying.copy()(self._attempt, call)
        except Exception as exc:
            self._give_up(call, exc)

    def _attempt(self, call: _Call) -> httpx.Response:
        namespace = call.next_namespace()
        try:
            response = self._http.send(self._build(call, namespace))
        except httpx.HTTPError as exc:
            return self._settle(call, namespace, exc)
        return self._settle(call, namespace, response)

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
