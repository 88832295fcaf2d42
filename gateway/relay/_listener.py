"""``GeoRelayListener``: one service listening on a hybrid connection in two namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from gateway._support.service_thread import AsyncService
from gateway.geo import GatewayHooks, emit
from gateway.relay import protocol as p
from gateway.relay._handler import Handler, RelayRequest, RelayResponse
from gateway.relay._serving import WebSocketHandler, answer, rendezvous, take_websocket
from replication import ConfigError, GatewayError, MessageRejected, NamespaceUnavailable

if TYPE_CHECKING:
    import aiohttp

__all__ = ["BACKOFF", "GeoRelayListener"]

_LOG = logging.getLogger("gateway.relay")
#: Seconds before each reconnect attempt of a control channel, as in the Relay SDKs.
BACKOFF = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)
#: A control channel open this long (seconds) counts as working: the backoff starts over.
_STABLE = 1.0

ErrorCallback = Callable[[BaseException], None]


class GeoRelayListener(AsyncService):
    """Serve one hybrid connection in two (or more) namespaces at once.

    Each endpoint gets a control channel (``sb-hc-action=listen``) that reconnects
    after 0, 1, 2, 5, 10, then every 30 s, and gives up only when the hybrid
    connection does not exist (404). A refused token (401/403) is retried too, and
    reported as a :class:`MessageRejected` that says what to check; :attr:`refused`
    lists the namespaces that answered either way. Requests (inline or by rendezvous) go to
    ``handler``; its exception answers 500, no handler 501. WebSocket senders go to
    ``websocket_handler`` (none: rejected with 501). Tokens are renewed
    (``renewToken``) at three quarters of their lifetime.

    Args:
        endpoints: the hybrid connection in each namespace.
        handler: ``async (RelayRequest) -> RelayResponse``; see :func:`asgi_handler`.
        websocket_handler: ``async (Accept, websocket) -> None``; the socket is closed
            when it returns.
        token_ttl: lifetime of the tokens the listener signs (seconds).
        hooks: :class:`GatewayHooks`; ``on_namespace_down``/``on_namespace_up`` report
            control channels lost and (re)connected.
        on_error: called with every handler error and every lost control channel.
        backoff: the reconnect delays (tests shorten them).

    Raises:
        ConfigError: no endpoint, two alike, or a bad ``token_ttl``.
    """

    def __init__(self, endpoints: Sequence[p.RelayEndpoint], handler: Handler | None = None, *,
                 websocket_handler: WebSocketHandler | None = None, token_ttl: float = 3600.0,
                 hooks: Sequence[GatewayHooks] = (), on_error: ErrorCallback | None = None,
                 backoff: Sequence[float] = BACKOFF) -> None:
        if not endpoints:
            raise ConfigError("a relay listener needs at least one endpoint")
        names = [(e.namespace, e.path.lower()) for e in endpoints]
        if len(set(names)) != len(names):
            raise ConfigError("the relay listener was given the same endpoint twice")
        if not token_ttl >= 2.0:
            raise ConfigError(f"token_ttl must be >= 2 seconds, got {token_ttl!r}")
        if not backoff or any(not d >= 0 for d in backoff):
            raise ConfigError("backoff must be a non-empty list of delays >= 0")
        self.endpoints = tuple(endpoints)
        self.handler = handler
        self.websocket_handler = websocket_handler
        self.token_ttl = token_ttl
        self.hooks = tuple(hooks)
        self.on_error = on_error
        self.backoff = tuple(backoff)
        self.listener_id = uuid.uuid4().hex
        self._connected: dict[p.RelayEndpoint, asyncio.Event] = {}
        self._attempted: dict[p.RelayEndpoint, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._channels: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._failures: dict[p.RelayEndpoint, BaseException] = {}

    def __repr__(self) -> str:
        return f"GeoRelayListener({[e.http_url() for e in self.endpoints]})"

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Open the control channels (in the background; see :meth:`wait_connected`)."""
        import aiohttp  # lazily: the CLI's start-up time

        if self._session is not None:
            return
        self._session = aiohttp.ClientSession()
        loop = asyncio.get_running_loop()
        for endpoint in self.endpoints:
            self._connected[endpoint] = asyncio.Event()
            self._attempted[endpoint] = asyncio.Event()
            self._channels.append(loop.create_task(self._channel(endpoint)))

    async def aclose(self) -> None:
        """Close the control channels and the requests in flight. Safe to call twice."""
        tasks = [*self._channels, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._channels.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def wait_connected(self, timeout: float = 10.0, *, all_endpoints: bool = True) -> None:
        """Wait until every (or one) control channel is connected.

        Raises:
            NamespaceUnavailable: not connected in time (or the hybrid connection
                does not exist).
        """
        if not self._connected:
            raise RuntimeError("start the relay listener first (start() or async with)")
        waits = [asyncio.ensure_future(e.wait()) for e in self._connected.values()]
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=(
                asyncio.ALL_COMPLETED if all_endpoints else asyncio.FIRST_COMPLETED))
        finally:
            for w in waits:
                w.cancel()
        if len(done) < (len(waits) if all_endpoints else 1):
            missing = [e.namespace for e, ev in self._connected.items() if not ev.is_set()]
            raise NamespaceUnavailable(f"relay listener not connected in {timeout:g} s",
                                       namespace=",".join(missing))

    @property
    def connected(self) -> list[str]:
        """The namespaces whose control channel is connected now."""
        return [e.namespace for e, ev in self._connected.items() if ev.is_set()]

    @property
    def refused(self) -> dict[str, GatewayError]:
        """The namespaces that refused the listener for a reason a retry does not mend,
        unless connected since: its hybrid connection does not exist (``ConfigError``,
        given up) or its token was refused (``MessageRejected``, still retried)."""
        return {e.namespace: error for e, error in self._failures.items()
                if isinstance(error, (ConfigError, MessageRejected))}

    async def wait_attempted(self, timeout: float = 10.0) -> None:
        """Wait until every control channel has connected or failed at least once (or
        ``timeout`` seconds passed): then :attr:`connected` and :attr:`refused` say
        how the first attempts went."""
        if not self._attempted:
            raise RuntimeError("start the relay listener first (start() or async with)")
        waits = [asyncio.ensure_future(e.wait()) for e in self._attempted.values()]
        try:
            await asyncio.wait(waits, timeout=timeout)
        finally:
            for w in waits:
                w.cancel()

    async def wait_given_up(self) -> None:
        """Wait until every control channel gave up (every hybrid connection is gone)."""
        await asyncio.gather(*self._channels, return_exceptions=True)

    async def serve_forever(self) -> None:
        """Start, and serve until cancelled or every channel gave up (404).

        Raises:
            NamespaceUnavailable: every hybrid connection was found missing.
        """
        await self.start()
        try:
            await asyncio.gather(*self._channels)
        finally:
            await self.aclose()
        raise NamespaceUnavailable("every hybrid connection of the listener is gone (404): "
                                   "create them, or fix the endpoints",
                                   namespace=",".join(e.namespace for e in self.endpoints))

    def run(self) -> None:
        """Serve in this thread until Ctrl-C (a sync way to run the listener)."""
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(self.serve_forever())

    # -- the control channel ----------------------------------------------------------

    async def _channel(self, endpoint: p.RelayEndpoint) -> None:
        import aiohttp

        attempt = 0
        while True:
            try:
                assert self._session is not None
                ws = await self._session.ws_connect(
                    endpoint.listen_url(listener_id=self.listener_id),
                    headers={"ServiceBusAuthorization": endpoint.token(ttl=self.token_ttl)},
                    heartbeat=30.0, max_msg_size=0)
            except aiohttp.WSServerHandshakeError as exc:
                error: BaseException = exc
                if exc.status == 404:
                    self._lost(endpoint, ConfigError(
                        f"hybrid connection {endpoint.path!r} does not exist in "
                        f"{endpoint.namespace}: check its name (-c / EntityPath), or "
                        "create it"))
                    return
                if exc.status in (401, 403):  # retried: a key may be rotated back
                    error = MessageRejected(
                        f"relay namespace {endpoint.namespace} refused the listener's token "
                        f"({exc.status}): check the shared access key name and key "
                        "(SharedAccessKeyName, SharedAccessKey), that the policy has the "
                        "Listen right, and this machine's clock")
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                error = exc
            except Exception as exc:  # a bug must not end this namespace's channel silently
                _LOG.exception("relay listener: connecting to %s failed", endpoint.namespace)
                error = exc
            else:
                opened = asyncio.get_running_loop().time()
                error = await self._connected_channel(endpoint, ws)
                # Start the table again after a channel that worked, but not after one
                # closed at once (a relay in trouble): that would spin.
                if asyncio.get_running_loop().time() - opened >= _STABLE:
                    attempt = 0
            self._lost(endpoint, error)
            await asyncio.sleep(self.backoff[min(attempt, len(self.backoff) - 1)])
            attempt += 1

    async def _connected_channel(self, endpoint: p.RelayEndpoint,
                                 ws: aiohttp.ClientWebSocketResponse[bool]) -> BaseException:
        self._connected[endpoint].set()
        self._attempted[endpoint].set()
        self._failures.pop(endpoint, None)
        emit(self.hooks, "on_namespace_up", namespace=endpoint.namespace)
        _LOG.info("relay listener connected to %s", endpoint.http_url())
        # One lock per channel: a message and its body frame (a response, or a renewal
        # between them) must not interleave.
        lock = asyncio.Lock()
        renewer = asyncio.get_running_loop().create_task(self._renew(endpoint, ws, lock))
        try:
            reason = await self._receive(endpoint, ws, lock)
        except Exception as exc:  # a bug: report it, close, and reconnect
            _LOG.exception("relay listener: the channel to %s failed", endpoint.namespace)
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            renewer.cancel()
            self._connected[endpoint].clear()
            await ws.close()
        return NamespaceUnavailable(f"relay control channel to {endpoint.namespace} closed: "
                                    f"{reason}", namespace=endpoint.namespace)

    def _lost(self, endpoint: p.RelayEndpoint, error: BaseException) -> None:
        first = endpoint not in self._failures
        self._failures[endpoint] = error
        self._attempted[endpoint].set()
        if first:  # report an outage once, not at every reconnect attempt
            _LOG.warning("relay listener lost %s: %s", endpoint.namespace, error)
            emit(self.hooks, "on_namespace_down", namespace=endpoint.namespace, error=error)
            self._report(error)

    def _report(self, error: BaseException) -> None:
        if self.on_error is not None:
            try:
                self.on_error(error)
            except Exception:
                _LOG.exception("the relay listener's on_error callback failed")

    async def _renew(self, endpoint: p.RelayEndpoint,
                     ws: aiohttp.ClientWebSocketResponse[bool], lock: asyncio.Lock) -> None:
        # A token's expiry is whole seconds (int(now + ttl)): it may end up to 1 s early.
        while True:
            await asyncio.sleep((self.token_ttl - 1.0) * 0.75)
            renewal = p.encode(p.RenewToken(token=endpoint.token(ttl=self.token_ttl)))
            try:
                async with lock:
                    await ws.send_str(renewal)
            except Exception as exc:  # the channel is going; the receive loop reports it
                _LOG.info("relay listener: renewing the token at %s failed: %s",
                          endpoint.namespace, type(exc).__name__)
                return

    async def _receive(self, endpoint: p.RelayEndpoint, ws: aiohttp.ClientWebSocketResponse[bool],
                       lock: asyncio.Lock) -> str:
        import aiohttp

        while True:
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    return "the relay sent a binary frame where a control message belongs"
                return f"close code {ws.close_code} {msg.extra or ''}".strip()
            try:
                message = p.decode(msg.data)
                if isinstance(message, p.Request):
                    body = b""
                    if message.body and not message.rendezvous:
                        body = await _read_body(ws)
                    self._spawn(self._serve_request(endpoint, ws, lock, message, body))
                elif isinstance(message, p.Accept):
                    self._spawn(self._serve_accept(message))
                else:
                    raise p.ProtocolError(f"the relay sent {type(message).__name__}")
            except p.ProtocolError as exc:
                self._report(exc)
                return f"protocol error: {exc}"

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- requests -------------------------------------------------------------------

    async def _serve_request(self, endpoint: p.RelayEndpoint,
                             ws: aiohttp.ClientWebSocketResponse[bool], lock: asyncio.Lock,
                             message: p.Request, body: bytes) -> None:
        try:
            if message.rendezvous:
                await rendezvous(self, endpoint, message)
            else:
                await answer(self, endpoint, ws, lock, message, body)
        except Exception as exc:  # the sender gets 502/504 from the relay; we log it
            _LOG.warning("relay request %s could not be answered: %s", message.id, exc)
            self._report(exc)

    async def respond(self, endpoint: p.RelayEndpoint, request: RelayRequest) -> RelayResponse:
        """Run the handler on ``request``: its exception gives 500, no handler 501."""
        if self.handler is None:
            return RelayResponse(status=501, reason="Not Implemented",
                                 body=b"this relay listener has no request handler\n")
        try:
            return await self.handler(request)
        except Exception as exc:
            _LOG.exception("the relay request handler failed on %s %s", request.method,
                           request.target)
            self._report(exc)
            return RelayResponse(status=500, reason="Internal Server Error",
                                 body=b"the request handler failed\n")

    async def _serve_accept(self, accept: p.Accept) -> None:
        try:
            await take_websocket(self, accept)
        except Exception as exc:
            _LOG.warning("relay WebSocket %s failed: %s", accept.id, exc)
            self._report(exc)

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session of the listener's sockets (open between start and aclose)."""
        if self._session is None:
            raise RuntimeError("the relay listener is not started")
        return self._session


async def _read_body(ws: aiohttp.ClientWebSocketResponse[bool]) -> bytes:
    import aiohttp

    msg = await ws.receive()
    if msg.type != aiohttp.WSMsgType.BINARY:
        raise p.ProtocolError("a request with body=true must be followed by a binary frame")
    data: bytes = msg.data
    return data
