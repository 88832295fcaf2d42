"""Helpers of the relay emulator: headers and targets, body frames, WebSocket piping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit

from aiohttp import WSMsgType, web

from gateway.amqp.server import AuthError, Grant, check_token
from gateway.relay import protocol as p
from gateway.relay.protocol import ProtocolError

__all__ = ["AUTH_HEADERS", "HOP_BY_HOP", "forwarded_headers", "grant_for", "pipe",
           "read_body", "relay_error", "relayed", "remote", "target"]

#: Headers that stay on their own hop (the relay's connection), never forwarded.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade", "host",
                        "content-length", "te", "trailer", "proxy-connection"})
#: Where a sender may put its token, in the order they are looked at.
AUTH_HEADERS = (p.TOKEN, "ServiceBusAuthorization", "Authorization")


async def read_body(ws: web.WebSocketResponse) -> bytes:
    """The binary message that follows a control message with ``body: true``.

    Raises:
        ProtocolError: the next message is not binary.
        ConnectionResetError: the socket closed first (the peer went away: no fault).
    """
    msg = await ws.receive()
    if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
        raise ConnectionResetError("the socket closed before the body frame")
    if msg.type != WSMsgType.BINARY:
        raise ProtocolError("a control message with body=true must be followed by a "
                            "binary frame")
    data: bytes = msg.data
    return data


async def pipe(a: web.WebSocketResponse, b: web.WebSocketResponse,
               gate: Callable[[], Awaitable[None]]) -> None:
    """Relay messages both ways until one side closes; then close the other alike.

    ``gate`` is awaited before each message is passed on (it waits while the
    namespace hangs).
    """
    tasks = [asyncio.ensure_future(_forward(a, b, gate)),
             asyncio.ensure_future(_forward(b, a, gate))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ws in (a, b):
            with contextlib.suppress(Exception):
                await ws.close()


async def _forward(src: web.WebSocketResponse, dst: web.WebSocketResponse,
                   gate: Callable[[], Awaitable[None]]) -> None:
    async for msg in src:
        await gate()
        if msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        else:
            break
    code = src.close_code or 1000
    await dst.close(code=code if code in (1000, 1001, 1008, 1011) or code >= 3000 else 1000)


def relay_error(status: int, text: str) -> web.Response:
    """A response the relay made itself: no ``Via`` header."""
    return web.Response(status=status, text=text + "\n")


def target(request: web.Request) -> str:
    """The request target a listener sees: every ``sb-hc-*`` query parameter (the
    relay's own: token, action, id, ...) removed, as the service does."""
    query = [(k, v) for k, v in request.query.items() if not k.lower().startswith("sb-hc-")]
    return request.path + (f"?{urlencode(query)}" if query else "")


def forwarded_headers(request: web.Request) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in request.headers.items():
        if name.lower() in HOP_BY_HOP or name.lower() in ("servicebusauthorization",
                                                           p.TOKEN):
            continue
        found[name] = f"{found[name]}, {value}" if name in found else value
    if not (p.TOKEN in request.query or any(h in request.headers for h in AUTH_HEADERS[:2])):
        found.pop("Authorization", None)  # it carried the relay's token
    return found


def remote(request: web.Request) -> p.RemoteEndpoint:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return p.RemoteEndpoint(address=str(peer[0]), port=int(peer[1]))
    return p.RemoteEndpoint()


def grant_for(token: str, path: str, *, host: str, key_name: str, key: str,
              now: float) -> Grant:
    """Check ``token`` for hybrid connection ``path`` (its own or a namespace-wide audience)
    of the namespace reached as ``host`` (the request's ``Host``, a port allowed).

    A token is signed for a URI that names the namespace's host (``http://{ns}/{path}/``):
    one signed for another host is refused, as the service refuses a token of another
    namespace signed with a key that happens to match.

    Raises:
        AuthError: a bad, expired or foreign token (another host or hybrid connection).
    """
    fields = dict(parse_qsl(token.partition(" ")[2]))
    sr = fields.get("sr", "")
    grant = check_token(token, audience=sr, key_name=key_name, key=key, now=now)
    signed_for, reached = _hostname(sr), _hostname(host)
    if reached and signed_for != reached:
        raise AuthError(f"the token is for another host ({signed_for or 'none'}), not "
                        f"{reached}")
    if not grant.covers(path, now):
        raise AuthError("the token is for another hybrid connection")
    return grant


def _hostname(uri: str) -> str:
    # "http://Host:1/hc/", "host/hc", "host:1" -> "host"
    if "://" not in uri:
        uri = "//" + uri
    try:
        return (urlsplit(uri).hostname or "").lower()
    except ValueError:
        return ""


def relayed(response: p.Response, body: bytes, *, via: str) -> web.Response:
    """The sender's response from a listener's: its headers, and ``Via``."""
    headers = {k: v for k, v in response.response_headers.items()
               if k.lower() not in HOP_BY_HOP}
    headers["Via"] = via
    reason = response.status_description.replace("\r", " ").replace("\n", " ") or None
    return web.Response(status=response.status_code, reason=reason, headers=headers, body=body)
