"""One emulated relay namespace: the Hybrid Connections endpoints on one loopback port.

Routes (one aiohttp server, HTTP and WebSocket on the same port):

- ``GET /$hc/{path}?sb-hc-action=listen``: a listener's control channel;
- ``GET /$hc/{path}?sb-hc-action=request&sb-hc-id=ID``: a listener's rendezvous socket
  for request ``ID`` (its address is the capability: no token, as in the service);
- ``GET /$hc/{path}?sb-hc-action=connect``: a WebSocket sender;
- ``GET /$hc/{path}?sb-hc-action=accept&sb-hc-id=ID``: a listener taking (or, with
  ``sb-hc-statusCode``, rejecting) WebSocket sender ``ID``;
- any method on ``/{path}[/...]``: an HTTP sender.

The relay answers by itself (no ``Via`` header) with 401 (bad token), 404 (no such
hybrid connection), 502 (the request could not be routed to a listener: none is
connected, or the one chosen went away before it had the request), 504 (the request
reached a listener, which did not answer in time or went away first: the outcome is
unknown) and 413 (a body over :data:`MAX_BODY`). The source is the sender's error table
of the protocol article (relay-hybrid-connections-protocol, "Request"): "Bad Gateway:
the request couldn't be routed to any listener" (it writes 503 there and 502 in its
text; senders fail over on either) and "504 Gateway Timeout: the request was routed to
a listener, but the listener didn't acknowledge receipt in the required time". A
listener that went away after the request was routed to it is that second case; the
emulator answers it as soon as the listener is gone instead of after the timeout.
Responses that a listener wrote carry ``Via: 1.1 {namespace}``.

While the control file says ``hang``, the namespace accepts connections and answers
nothing: HTTP requests, WebSocket handshakes and frames (control channels, pings
included) wait until the hang is lifted (or the namespace goes down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import WSMsgType, web

from gateway.amqp.server import AuthError, Grant
from gateway.emulator.relay._control import Listener, Pending, control_loop
from gateway.emulator.relay._io import (
    AUTH_HEADERS,
    forwarded_headers,
    grant_for,
    pipe,
    read_body,
    relay_error,
    relayed,
    remote,
    target,
)
from gateway.relay import protocol as p
from gateway.transports import ControlFile, ControlState

_LOG = logging.getLogger("gateway.relay.emulator")

#: Listeners per hybrid connection, as in the service.
MAX_LISTENERS = 25
#: The largest request or response body the emulator relays (bytes).
MAX_BODY = 64 * 1024 * 1024
#: How often a request held by a hung namespace looks whether the hang is over (seconds).
_HANG_POLL = 0.05


@dataclass(eq=False)
class _Accepting:
    path: str
    taken: asyncio.Future[web.WebSocketResponse | tuple[int, str]]
    done: asyncio.Event = field(default_factory=asyncio.Event)


class RelayNamespace:
    """The relay endpoints of one namespace on ``host:port`` (0: a free port, kept)."""

    def __init__(self, name: str, port: int, *, host: str, paths: frozenset[str],
                 key_name: str, key: str, control: ControlFile, answer_timeout: float,
                 clock: Any) -> None:
        self.name, self.host, self.port = name, host, port
        self.paths = paths
        self.key_name, self._key = key_name, key
        self.control = control
        self.state = ControlState()
        self.answer_timeout = answer_timeout
        self.clock = clock
        self.rng = random.Random()
        self.listeners: dict[str, list[Listener]] = {path: [] for path in paths}
        self._pending: dict[str, Pending] = {}
        self._accepting: dict[str, _Accepting] = {}
        self._sockets: set[web.WebSocketResponse] = set()
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Listen (and stop again at once if the control file says down)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self.state = self.control.read()
        await self.listen()
        if self.state.down:
            await self.stop_serving()

    async def listen(self) -> None:
        """Open the listening socket (on the port fixed by the first start)."""
        assert self._runner is not None
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self._site = site
        self.port = self._runner.addresses[-1][1]  # the port 0 got: kept across down/up

    @property
    def serving(self) -> bool:
        """Whether the listening socket is open."""
        return self._site is not None

    async def stop_serving(self, code: int = p.CLOSE_SERVICE_ERROR,
                           reason: str = "the namespace is unavailable") -> None:
        """Close the listening socket and every connection, as an outage does."""
        site, self._site = self._site, None
        if site is not None:
            await site.stop()
        for pending in list(self._pending.values()):
            pending.went_away(reason)
        closing = [ws.close(code=code, message=reason.encode()) for ws in list(self._sockets)]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 1.0)
        if self._runner is not None and self._runner.server is not None:
            for conn in self._runner.server.connections:
                conn.force_close()

    async def aclose(self) -> None:
        """Stop serving and free the server."""
        await self.stop_serving(p.CLOSE_UNAVAILABLE, "the emulator is shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _lose_reply(self) -> bool:
        p_lost = self.state.lost_replies
        return p_lost > 0 and self.rng.random() < p_lost

    def apply(self, state: ControlState) -> bool:
        """Take a new control state; return whether it changed down/up."""
        changed = state.down != self.state.down
        self.state = state
        return changed

    async def while_hung(self) -> None:
        """Wait while the namespace hangs (and serves: going down ends the wait)."""
        # Polled: a hung namespace holds few requests, and the control file itself is
        # looked at every 0.1 s.
        while self.state.hang and self.serving:  # noqa: ASYNC110
            await asyncio.sleep(_HANG_POLL)

    # -- routing --------------------------------------------------------------------

    async def _route(self, request: web.Request) -> web.StreamResponse:
        await self.while_hung()
        if self.state.latency > 0:
            await asyncio.sleep(self.state.latency)
        if self.state.down or not self.serving:  # before the next poll, or went down hung
            if request.transport is not None:
                request.transport.abort()
            return relay_error(503, f"namespace {self.name} is down")
        parts = request.path.lstrip("/").split("/", 2)
        if parts[0] == "$hc":
            return await self._hc(request, parts[1] if len(parts) > 1 else "")
        response = await self._http_send(request, parts[0])
        await self.while_hung()  # a request in flight when the hang began gets no answer
        return response

    async def _hc(self, request: web.Request, path: str) -> web.StreamResponse:
        action = request.query.get(p.ACTION, "")
        if action == "request":
            return await self._rendezvous(request, path.lower())
        if action == "accept":
            return await self._accept(request, path.lower())
        if action not in ("listen", "connect"):
            return relay_error(400, f"{p.ACTION} must be listen, connect, accept or request")
        known = self._known(path)
        if known is None:
            return relay_error(404, f"hybrid connection {path!r} does not exist")
        try:
            grant = self._authorize(request, known)
        except AuthError as exc:
            _LOG.info("namespace %s: a listener or sender was refused: %s", self.name, exc)
            return relay_error(401, f"unauthorized: {exc}")
        if action == "listen":
            return await self._listen(request, known, grant)
        return await self._connect(request, known)

    def _known(self, path: str) -> str | None:
        lowered = path.lower()
        return lowered if lowered in self.paths else None

    def _authorize(self, request: web.Request, path: str) -> Grant:
        token = request.query.get(p.TOKEN) or next(
            (request.headers[h] for h in AUTH_HEADERS if h in request.headers), "")
        if not token:
            raise AuthError("no token: send it in ServiceBusAuthorization or sb-hc-token")
        return grant_for(token, path, host=request.host, key_name=self.key_name,
                         key=self._key, now=self.clock())

    def _address(self, action: str, path: str, ident: str) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        query = urlencode({p.ACTION: action, p.ID: ident})
        return f"ws://{host}:{self.port}/$hc/{path}?{query}"

    # -- listeners ------------------------------------------------------------------

    async def _listen(self, request: web.Request, path: str, grant: Grant) -> web.StreamResponse:
        if len(self.listeners[path]) >= MAX_LISTENERS:
            return relay_error(403, f"hybrid connection {path!r} has {MAX_LISTENERS} "
                                     "listeners already")
        # Pings answered by the control loop, so that a hung namespace answers none.
        ws = await self._upgrade(request, autoping=False)
        listener = Listener(ws=ws, path=path, host=request.host, expires=grant.expires)
        self.listeners[path].append(listener)
        expiry = asyncio.get_running_loop().create_task(self._expire(listener))
        try:
            await control_loop(listener, namespace=self.name, pending=self._pending,
                               renew=self._renew, gate=self.while_hung)
        finally:
            expiry.cancel()
            self.listeners[path].remove(listener)
            self._sockets.discard(ws)
            for pending in list(self._pending.values()):
                if pending.listener is listener:
                    pending.went_away("its listener went away")
        return ws

    async def _upgrade(self, request: web.Request, *,
                       autoping: bool = True) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_BODY, autoping=autoping)
        await ws.prepare(request)
        self._sockets.add(ws)
        return ws

    async def _expire(self, listener: Listener) -> None:
        # Polled, not one sleep: renewToken moves the deadline while this waits.
        while (left := listener.expires - self.clock()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(left, 1.0))
        _LOG.info("namespace %s: a listener's token expired", self.name)
        await listener.ws.close(code=p.CLOSE_TOKEN_EXPIRED, message=b"token expired")

    def _renew(self, listener: Listener, message: p.RenewToken) -> None:
        listener.expires = grant_for(message.token, listener.path, host=listener.host,
                                     key_name=self.key_name, key=self._key,
                                     now=self.clock()).expires

    # -- HTTP senders ---------------------------------------------------------------

    async def _http_send(self, request: web.Request, path: str) -> web.StreamResponse:
        known = self._known(path)
        if known is None:
            return relay_error(404, f"hybrid connection {path!r} does not exist")
        try:
            self._authorize(request, known)
        except AuthError as exc:
            return relay_error(401, f"unauthorized: {exc}")
        if not self.listeners[known]:
            return relay_error(502, "no listener is connected to the hybrid connection")
        body = await request.read()
        ident = uuid.uuid4().hex
        listener = self.rng.choice(self.listeners[known])
        message = p.Request(address=self._address("request", known, ident), id=ident,
                            request_target=target(request), method=request.method,
                            request_headers=forwarded_headers(request),
                            remote_endpoint=remote(request), body=bool(body))
        inline = (len(body) <= p.INLINE_BODY_LIMIT
                  and p.headers_size(message.request_headers) <= p.INLINE_HEADERS_LIMIT)
        answer: asyncio.Future[tuple[p.Response, bytes]] = (
            asyncio.get_running_loop().create_future())
        pending = self._pending[ident] = Pending(message, body, inline, listener, answer)
        try:
            if inline:  # the listener has the request once its message is written
                await listener.send(message, body if body else None,
                                    sent=pending.mark_delivered)
            else:  # only the address: the request goes over the rendezvous socket
                await listener.send(p.Request(address=message.address, id=ident))
            response, out = await asyncio.wait_for(answer, self.answer_timeout)
            if self._lose_reply():  # the listener answered; the sender never hears of it
                await asyncio.sleep(self.answer_timeout)
                raise asyncio.TimeoutError
        except asyncio.TimeoutError:
            return relay_error(504, f"the listener did not answer in {self.answer_timeout:g} s")
        except (ConnectionError, RuntimeError) as exc:
            if pending.delivered:  # it may have acted on the request: the outcome is unknown
                return relay_error(504, f"the listener went away after the request reached "
                                        f"it, before answering ({exc})")
            return relay_error(502, f"the listener went away before the request reached it "
                                    f"({exc})")
        finally:
            del self._pending[ident]
        return relayed(response, out, via=f"1.1 {self.name}")

    async def _rendezvous(self, request: web.Request, path: str) -> web.StreamResponse:
        pending = self._pending.get(request.query.get(p.ID, ""))
        if pending is None or pending.listener.path != path or pending.answer.done():
            return relay_error(404, "no such request: it was answered or timed out")
        ws = await self._upgrade(request)
        try:
            if not pending.inline:
                pending.mark_delivered()  # as the write begins (see Listener.send)
                await ws.send_str(p.encode(pending.request))
                if pending.body:
                    await ws.send_bytes(pending.body)
            msg = await ws.receive()
            await self.while_hung()
            if msg.type != WSMsgType.TEXT:
                pending.went_away("the rendezvous socket closed before a response")
                return ws
            message = p.decode(msg.data)
            if not isinstance(message, p.Response):
                raise p.ProtocolError("a rendezvous socket carries a response")
            body = await read_body(ws) if message.body else b""
            if not pending.answer.done():
                pending.answer.set_result((message, body))
            await ws.close()
        except p.ProtocolError as exc:
            _LOG.warning("namespace %s: closing a rendezvous socket (1002): %s", self.name, exc)
            await ws.close(code=1002, message=str(exc)[:120].encode())
            pending.went_away(str(exc))
        except (ConnectionError, RuntimeError) as exc:
            pending.went_away(f"the rendezvous socket failed: {exc}")
        finally:
            self._sockets.discard(ws)
        return ws

    # -- WebSocket senders ----------------------------------------------------------

    async def _connect(self, request: web.Request, path: str) -> web.StreamResponse:
        if not self.listeners[path]:
            return relay_error(404, "no listeners connected")
        ident = uuid.uuid4().hex
        accepting = _Accepting(path, asyncio.get_running_loop().create_future())
        self._accepting[ident] = accepting
        listener = self.rng.choice(self.listeners[path])
        # Sec-WebSocket-* go along: the listener completes the handshake with them.
        headers = forwarded_headers(request)
        try:
            await listener.send(p.Accept(address=self._address("accept", path, ident),
                                         id=ident, connect_headers=headers,
                                         remote_endpoint=remote(request)))
            taken = await asyncio.wait_for(accepting.taken, self.answer_timeout)
        except asyncio.TimeoutError:
            return relay_error(504, "the listener did not accept in time")
        except (ConnectionError, RuntimeError):
            return relay_error(502, "the listener went away")
        finally:
            del self._accepting[ident]
        if isinstance(taken, tuple):
            return relay_error(*taken)
        try:
            sender = await self._upgrade(request)
            await pipe(sender, taken, self.while_hung)
        finally:
            self._sockets.discard(sender)
            accepting.done.set()  # the listener's side ends with the sender's
        return sender

    async def _accept(self, request: web.Request, path: str) -> web.StreamResponse:
        accepting = self._accepting.get(request.query.get(p.ID, ""))
        if accepting is None or accepting.path != path or accepting.taken.done():
            return relay_error(404, "no such connection: it was taken or timed out")
        # sb-hc-statusCode as the .NET client sends it, statusCode as the Node client does.
        status = request.query.get(p.STATUS_CODE, request.query.get("statusCode"))
        if status is not None:
            code = int(status) if status.isdigit() and 400 <= int(status) <= 599 else 400
            reason = request.query.get(p.STATUS_DESCRIPTION,
                                       request.query.get("statusDescription", ""))
            accepting.taken.set_result((code, reason))
            return web.Response(status=410, text="rejected\n")
        ws = await self._upgrade(request)
        accepting.taken.set_result(ws)
        try:
            await accepting.done.wait()
        finally:
            self._sockets.discard(ws)
        return ws
