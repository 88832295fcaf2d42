"""How a relay listener answers: on the control channel, by rendezvous, and WebSockets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlencode

from gateway.relay import protocol as p
from gateway.relay._handler import RelayRequest, RelayResponse

if TYPE_CHECKING:
    import aiohttp

__all__ = ["Listener", "WebSocketHandler", "answer", "rendezvous", "take_websocket"]

WebSocketHandler = Callable[[p.Accept, "aiohttp.ClientWebSocketResponse[bool]"], Awaitable[None]]
"""What serves a WebSocket sender: ``async (accept, websocket)``."""


class Listener(Protocol):
    """What answering needs of a listener (:class:`~gateway.relay.GeoRelayListener`).

    A protocol, so that this module does not import the listener that calls it.
    """

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session for the rendezvous and WebSocket sockets."""
        ...

    @property
    def websocket_handler(self) -> WebSocketHandler | None:
        """Where WebSocket senders go (None: they are rejected with 501)."""
        ...

    async def respond(self, endpoint: p.RelayEndpoint, request: RelayRequest) -> RelayResponse:
        """Run the request handler on ``request``."""
        ...


def _relay_request(endpoint: p.RelayEndpoint, message: p.Request, body: bytes) -> RelayRequest:
    remote = message.remote_endpoint
    return RelayRequest(method=message.method or "GET", target=message.request_target or "/",
                        headers=dict(message.request_headers), body=body,
                        namespace=endpoint.namespace, hybrid_connection=endpoint.path,
                        remote_address=(remote.address, remote.port) if remote else None)


def _response_message(request_id: str, response: RelayResponse) -> p.Response:
    return p.Response(request_id=request_id, status_code=response.status,
                      status_description=response.reason,
                      response_headers=dict(response.headers), body=bool(response.body))


async def answer(listener: Listener, endpoint: p.RelayEndpoint,
                 ws: aiohttp.ClientWebSocketResponse[bool], lock: asyncio.Lock,
                 message: p.Request, body: bytes) -> None:
    """Serve an inline request; answer on the control channel, or by rendezvous when large."""
    response = await listener.respond(endpoint, _relay_request(endpoint, message, body))
    reply = _response_message(message.id, response)
    if (len(response.body) > p.INLINE_BODY_LIMIT
            or p.headers_size(reply.response_headers) > p.INLINE_HEADERS_LIMIT):
        async with listener.session.ws_connect(message.address, max_msg_size=0) as rz:
            await _send(rz, reply, response.body)
            await _closed(rz)
        return
    async with lock:  # a response and its body frame must not interleave with another's
        await _send(ws, reply, response.body)


async def rendezvous(listener: Listener, endpoint: p.RelayEndpoint,
                     message: p.Request) -> None:
    """Open the request's address, read the request there and write the response there."""
    import aiohttp

    async with listener.session.ws_connect(message.address, max_msg_size=0) as rz:
        first = await rz.receive()
        if first.type != aiohttp.WSMsgType.TEXT:
            raise p.ProtocolError("the rendezvous socket closed before the request came")
        request = p.decode(first.data)
        if not isinstance(request, p.Request) or request.rendezvous:
            raise p.ProtocolError("a rendezvous socket must carry a full request message")
        body = b""
        if request.body:
            data = await rz.receive()
            if data.type != aiohttp.WSMsgType.BINARY:
                raise p.ProtocolError("a request with body=true must be followed by a "
                                      "binary frame")
            body = data.data
        response = await listener.respond(endpoint, _relay_request(endpoint, request, body))
        await _send(rz, _response_message(request.id, response), response.body)
        await _closed(rz)


async def _send(ws: aiohttp.ClientWebSocketResponse[bool], reply: p.Response, body: bytes) -> None:
    await ws.send_str(p.encode(reply))
    if reply.body:
        await ws.send_bytes(body)


async def _closed(ws: aiohttp.ClientWebSocketResponse[bool]) -> None:
    # The relay closes the rendezvous socket once it has the response.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(ws.receive(), 5.0)


async def take_websocket(listener: Listener, accept: p.Accept) -> None:
    """Take a WebSocket sender (to the websocket handler), or reject it with 501."""
    handler = listener.websocket_handler
    if handler is None:
        import aiohttp

        query = urlencode({p.STATUS_CODE: 501,
                           p.STATUS_DESCRIPTION: "this listener takes no WebSockets"})
        with contextlib.suppress(aiohttp.ClientError):  # the relay ends the reject socket
            async with listener.session.ws_connect(f"{accept.address}&{query}"):
                pass
        return
    async with listener.session.ws_connect(accept.address, max_msg_size=0) as ws:
        try:
            await handler(accept, ws)
        except Exception:
            await ws.close(code=p.CLOSE_SERVICE_ERROR, message=b"the WebSocket handler failed")
            raise
