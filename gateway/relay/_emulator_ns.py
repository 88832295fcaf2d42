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
hybrid connection), 502 (no listener connected, or the listener went away: the
protocol article's text says 502 where its table says 503; senders fail over on
either), 504 (no answer in time) and 413 (a body over :data:`MAX_BODY`). Responses
that a listener wrote carry ``Via: 1.1 {namespace}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import WSMsgType, web

from gateway.emulator._auth import AuthError, Grant, check_token
from gateway.relay import _protocol as p
from gateway.relay._emulator_ws import pipe, read_body
from gateway.transports._local_control import ControlFile, ControlState

_LOG = logging.getLogger("gateway.relay.emulator")

#: Listeners per hybrid connection, as in the service.
MAX_LISTENERS = 25
#: The largest request or response body the emulator relays (bytes).
MAX_BODY = 64 * 1024 * 1024
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade", "host",
                         "content-length", "te", "trailer", "proxy-connection"})
_AUTH_HEADERS = (p.TOKEN, "ServiceBusAuthorization", "Authorization")


@dataclass(eq=False)
class _Listener:
    ws: web.WebSocketResponse
    path: str
    expires: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, message: p.ControlMessage, body: bytes | None = None) -> None:
        # A message and its body frame must not interleave with another request's.
        async with self.lock:
            await self.ws.send_str(p.encode(message))
            if body is not None:
                await self.ws.send_bytes(body)


@dataclass(eq=False)
class _Pending:
    request: p.Request
    body: bytes
    inline: bool
    listener: _Listener
    answer: asyncio.Future[tuple[p.Response, bytes]]


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
        self.listeners: dict[str, list[_Listener]] = {path: [] for path in paths}
        self._pending: dict[str, _Pending] = {}
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
        server = site._server  # noqa: SLF001 - aiohttp exposes the bound port only here
        if isinstance(server, asyncio.base_events.Server) and server.sockets:
            self.port = server.sockets[0].getsockname()[1]

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
            if not pending.answer.done():
                pending.answer.set_exception(ConnectionAbortedError(reason))
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

    def apply(self, state: ControlState) -> bool:
        """Take a new control state; return whether it changed down/up."""
        changed = state.down != self.state.down
        self.state = state
        return changed

    # -- routing --------------------------------------------------------------------

    async def _route(self, request: web.Request) -> web.StreamResponse:
        if self.state.latency > 0:
            await asyncio.sleep(self.state.latency)
        if self.state.down:  # between the control file's change and the next poll
            if request.transport is not None:
                request.transport.abort()
            return _relay_error(503, f"namespace {self.name} is down")
        parts = request.path.lstrip("/").split("/", 2)
        if parts[0] == "$hc":
            return await self._hc(request, parts[1] if len(parts) > 1 else "")
        return await self._http_send(request, parts[0])

    async def _hc(self, request: web.Request, path: str) -> web.StreamResponse:
        action = request.query.get(p.ACTION, "")
        if action == "request":
            return await self._rendezvous(request, path.lower())
        if action == "accept":
            return await self._accept(request, path.lower())
        if action not in ("listen", "connect"):
            return _relay_error(400, f"{p.ACTION} must be listen, connect, accept or request")
        known = self._known(path)
        if known is None:
            return _relay_error(404, f"hybrid connection {path!r} does not exist")
        try:
            grant = self._authorize(request, known)
        except AuthError as exc:
            return _relay_error(401, f"unauthorized: {exc}")
        if action == "listen":
            return await self._listen(request, known, grant)
        return await self._connect(request, known)

    def _known(self, path: str) -> str | None:
        lowered = path.lower()
        return lowered if lowered in self.paths else None

    def _authorize(self, request: web.Request, path: str) -> Grant:
        token = request.query.get(p.TOKEN) or next(
            (request.headers[h] for h in _AUTH_HEADERS if h in request.headers), "")
        if not token:
            raise AuthError("no token: send it in ServiceBusAuthorization or sb-hc-token")
        fields = dict(parse_qsl(token.partition(" ")[2]))
        grant = check_token(token, audience=fields.get("sr", ""), key_name=self.key_name,
                            key=self._key, now=self.clock())
        if not grant.covers(path, self.clock()):
            raise AuthError("the token is for another hybrid connection")
        return grant

    def _address(self, action: str, path: str, ident: str) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        query = urlencode({p.ACTION: action, p.ID: ident})
        return f"ws://{host}:{self.port}/$hc/{path}?{query}"

    # -- listeners ------------------------------------------------------------------

    async def _listen(self, request: web.Request, path: str, grant: Grant) -> web.StreamResponse:
        if len(self.listeners[path]) >= MAX_LISTENERS:
            return _relay_error(403, f"hybrid connection {path!r} has {MAX_LISTENERS} "
                                     "listeners already")
        ws = await self._upgrade(request)
        listener = _Listener(ws=ws, path=path, expires=grant.expires)
        self.listeners[path].append(listener)
        expiry = asyncio.get_running_loop().create_task(self._expire(listener))
        try:
            await self._control_loop(listener)
        finally:
            expiry.cancel()
            self.listeners[path].remove(listener)
            self._sockets.discard(ws)
            for pending in list(self._pending.values()):
                if pending.listener is listener and not pending.answer.done():
                    pending.answer.set_exception(ConnectionAbortedError("listener went away"))
        return ws

    async def _upgrade(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_BODY, autoping=True)
        await ws.prepare(request)
        self._sockets.add(ws)
        return ws

    async def _expire(self, listener: _Listener) -> None:
        # Polled, not one sleep: renewToken moves the deadline while this waits.
        while (left := listener.expires - self.clock()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(left, 1.0))
        _LOG.info("namespace %s: a listener's token expired", self.name)
        await listener.ws.close(code=p.CLOSE_TOKEN_EXPIRED, message=b"token expired")

    async def _control_loop(self, listener: _Listener) -> None:
        ws = listener.ws
        while True:
            msg = await ws.receive()
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED,
                            WSMsgType.ERROR):
                return
            try:
                if msg.type != WSMsgType.TEXT:
                    raise p.ProtocolError("expected a text control frame, got a binary one")
                message = p.decode(msg.data)
                if isinstance(message, p.RenewToken):
                    self._renew(listener, message)
                elif isinstance(message, p.Response):
                    body = await read_body(ws) if message.body else b""
                    self._answer(message, body)
                else:
                    raise p.ProtocolError(f"a listener may not send {type(message).__name__}")
            except p.ProtocolError as exc:
                _LOG.warning("namespace %s: closing a listener: %s", self.name, exc)
                await ws.close(code=1002, message=str(exc)[:120].encode())
                return
            except AuthError as exc:
                await ws.close(code=p.CLOSE_TOKEN_EXPIRED, message=str(exc)[:120].encode())
                return

    def _renew(self, listener: _Listener, message: p.RenewToken) -> None:
        fields = dict(parse_qsl(message.token.partition(" ")[2]))
        grant = check_token(message.token, audience=fields.get("sr", ""),
                            key_name=self.key_name, key=self._key, now=self.clock())
        if not grant.covers(listener.path, self.clock()):
            raise AuthError("the renewed token is for another hybrid connection")
        listener.expires = grant.expires

    def _answer(self, response: p.Response, body: bytes) -> None:
        pending = self._pending.get(response.request_id)
        if pending is not None and not pending.answer.done():
            pending.answer.set_result((response, body))

    # -- HTTP senders ---------------------------------------------------------------

    async def _http_send(self, request: web.Request, path: str) -> web.StreamResponse:
        known = self._known(path)
        if known is None:
            return _relay_error(404, f"hybrid connection {path!r} does not exist")
        try:
            self._authorize(request, known)
        except AuthError as exc:
            return _relay_error(401, f"unauthorized: {exc}")
        if not self.listeners[known]:
            return _relay_error(502, "no listener is connected to the hybrid connection")
        body = await request.read()
        ident = uuid.uuid4().hex
        listener = self.rng.choice(self.listeners[known])
        message = p.Request(address=self._address("request", known, ident), id=ident,
                            request_target=_target(request), method=request.method,
                            request_headers=_forwarded_headers(request),
                            remote_endpoint=_remote(request), body=bool(body))
        inline = (len(body) <= p.INLINE_BODY_LIMIT
                  and p.headers_size(message.request_headers) <= p.INLINE_HEADERS_LIMIT)
        answer: asyncio.Future[tuple[p.Response, bytes]] = (
            asyncio.get_running_loop().create_future())
        self._pending[ident] = _Pending(message, body, inline, listener, answer)
        try:
            if inline:
                await listener.send(message, body if body else None)
            else:
                await listener.send(p.Request(address=message.address, id=ident))
            response, out = await asyncio.wait_for(answer, self.answer_timeout)
        except asyncio.TimeoutError:
            return _relay_error(504, f"the listener did not answer in {self.answer_timeout:g} s")
        except (ConnectionError, RuntimeError) as exc:
            return _relay_error(502, f"the listener went away before answering ({exc})")
        finally:
            del self._pending[ident]
        return self._relayed(response, out)

    def _relayed(self, response: p.Response, body: bytes) -> web.Response:
        headers = {k: v for k, v in response.response_headers.items()
                   if k.lower() not in _HOP_BY_HOP}
        headers["Via"] = f"1.1 {self.name}"
        reason = response.status_description.replace("\r", " ").replace("\n", " ") or None
        return web.Response(status=response.status_code, reason=reason, headers=headers,
                            body=body)

    async def _rendezvous(self, request: web.Request, path: str) -> web.StreamResponse:
        pending = self._pending.get(request.query.get(p.ID, ""))
        if pending is None or pending.listener.path != path or pending.answer.done():
            return _relay_error(404, "no such request: it was answered or timed out")
        ws = await self._upgrade(request)
        try:
            if not pending.inline:
                await ws.send_str(p.encode(pending.request))
                if pending.body:
                    await ws.send_bytes(pending.body)
            msg = await ws.receive()
            if msg.type != WSMsgType.TEXT:
                raise p.ProtocolError("the rendezvous socket closed before a response")
            message = p.decode(msg.data)
            if not isinstance(message, p.Response):
                raise p.ProtocolError("a rendezvous socket carries a response")
            body = await read_body(ws) if message.body else b""
            if not pending.answer.done():
                pending.answer.set_result((message, body))
            await ws.close()
        except p.ProtocolError as exc:
            await ws.close(code=1002, message=str(exc)[:120].encode())
            if not pending.answer.done():
                pending.answer.set_exception(ConnectionAbortedError(str(exc)))
        finally:
            self._sockets.discard(ws)
        return ws

    # -- WebSocket senders ----------------------------------------------------------

    async def _connect(self, request: web.Request, path: str) -> web.StreamResponse:
        if not self.listeners[path]:
            return _relay_error(404, "no listeners connected")
        ident = uuid.uuid4().hex
        accepting = _Accepting(path, asyncio.get_running_loop().create_future())
        self._accepting[ident] = accepting
        listener = self.rng.choice(self.listeners[path])
        headers = {k: v for k, v in _forwarded_headers(request).items()
                   if not k.lower().startswith("sec-websocket")}
        try:
            await listener.send(p.Accept(address=self._address("accept", path, ident),
                                         id=ident, connect_headers=headers,
                                         remote_endpoint=_remote(request)))
            taken = await asyncio.wait_for(accepting.taken, self.answer_timeout)
        except asyncio.TimeoutError:
            return _relay_error(504, "the listener did not accept in time")
        except (ConnectionError, RuntimeError):
            return _relay_error(502, "the listener went away")
        finally:
            del self._accepting[ident]
        if isinstance(taken, tuple):
            return _relay_error(*taken)
        sender = await self._upgrade(request)
        try:
            await pipe(sender, taken)
        finally:
            self._sockets.discard(sender)
            accepting.done.set()
        return sender

    async def _accept(self, request: web.Request, path: str) -> web.StreamResponse:
        accepting = self._accepting.get(request.query.get(p.ID, ""))
        if accepting is None or accepting.path != path or accepting.taken.done():
            return _relay_error(404, "no such connection: it was taken or timed out")
        status = request.query.get(p.STATUS_CODE)
        if status is not None:
            code = int(status) if status.isdigit() and 400 <= int(status) <= 599 else 400
            accepting.taken.set_result((code, request.query.get(p.STATUS_DESCRIPTION, "")))
            return web.Response(status=410, text="rejected\n")
        ws = await self._upgrade(request)
        accepting.taken.set_result(ws)
        try:
            await accepting.done.wait()
        finally:
            self._sockets.discard(ws)
        return ws


def _relay_error(status: int, text: str) -> web.Response:
    """A response the relay made itself: no ``Via`` header."""
    return web.Response(status=status, text=text + "\n")


def _target(request: web.Request) -> str:
    query = [(k, v) for k, v in request.query.items() if k != p.TOKEN]
    return request.path + (f"?{urlencode(query)}" if query else "")


def _forwarded_headers(request: web.Request) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in request.headers.items():
        if name.lower() in _HOP_BY_HOP or name.lower() in ("servicebusauthorization",
                                                           p.TOKEN):
            continue
        found[name] = f"{found[name]}, {value}" if name in found else value
    if not (p.TOKEN in request.query or any(h in request.headers for h in _AUTH_HEADERS[:2])):
        found.pop("Authorization", None)  # it carried the relay's token
    return found


def _remote(request: web.Request) -> p.RemoteEndpoint:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return p.RemoteEndpoint(address=str(peer[0]), port=int(peer[1]))
    return p.RemoteEndpoint()
