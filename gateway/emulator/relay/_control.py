"""The relay emulator's side of a listener: its control channel, and the requests it holds.

A listener's control channel carries ``request`` and ``accept`` messages to it and
``response`` and ``renewToken`` messages back. The relay refuses a listener that breaks
a MUST of the protocol loudly: a warning log line, and its control channel closed with
a close code that says why (RFC 6455 section 7.4.1):

- 1002 (protocol error): a frame that is not a control message, a binary frame where a
  control message belongs, a response without its body frame;
- 1009 (message too big): a response sent inline with a body over 64 KB or headers
  over 32 KB (the protocol requires the rendezvous socket for those);
- 1008 (policy violation): a ``renewToken`` with a bad token.

Whether a request had reached the listener matters when the listener goes away before
answering: not yet (502, the request was not forwarded: any sender may try elsewhere)
or already (504, the outcome is unknown). See :class:`Pending`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import WSMessage, WSMsgType, web

from gateway.amqp.server import AuthError
from gateway.emulator.relay._io import read_body
from gateway.relay import protocol as p

__all__ = ["CLOSE_PROTOCOL_ERROR", "CLOSE_TOO_BIG", "Listener", "Pending", "control_loop"]

_LOG = logging.getLogger("gateway.relay.emulator")

#: RFC 6455 close codes for a listener that broke the protocol.
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_TOO_BIG = 1009


class _TooBig(p.ProtocolError):
    """An inline response over the inline limits."""


@dataclass(eq=False)
class Listener:
    """One connected listener: its control channel, and what its token allows."""

    ws: web.WebSocketResponse
    path: str
    host: str  # the host the listener connected to: renewed tokens must be for it
    expires: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, message: p.ControlMessage, body: bytes | None = None, *,
                   sent: Callable[[], None] | None = None) -> None:
        """Send ``message`` (and its body frame); ``sent()`` as its write begins.

        From then on the listener may have it: a write can fail after its bytes reached
        the listener, and the request must then count as delivered (outcome unknown),
        never as not delivered (which a client may send again elsewhere).
        """
        # A message and its body frame must not interleave with another request's.
        async with self.lock:
            if sent is not None:
                sent()
            await self.ws.send_str(p.encode(message))
            if body is not None:
                await self.ws.send_bytes(body)


@dataclass(eq=False)
class Pending:
    """An HTTP request waiting for its listener's answer.

    ``delivered`` turns true once the listener has the request (its inline ``request``
    message written to the control channel, or the request written to its rendezvous
    socket): from then on, a listener that goes away may have acted on it.
    """

    request: p.Request
    body: bytes
    inline: bool
    listener: Listener
    answer: asyncio.Future[tuple[p.Response, bytes]]
    delivered: bool = False

    def mark_delivered(self) -> None:
        self.delivered = True

    def went_away(self, reason: str) -> None:
        """The listener is gone: end the wait (502 or 504 by ``delivered``)."""
        if not self.answer.done():
            self.answer.set_exception(ConnectionAbortedError(reason))


Renew = Callable[[Listener, p.RenewToken], None]


async def control_loop(listener: Listener, *, namespace: str, pending: dict[str, Pending],
                       renew: Renew, gate: Callable[[], Awaitable[None]]) -> None:
    """Serve one listener's control channel until it closes, or close it for a violation.

    Args:
        namespace: the namespace's name, for log lines.
        pending: the namespace's requests in flight, by id.
        renew: checks a ``renewToken`` and moves the listener's expiry.
        gate: awaited before each frame is taken (it waits while the namespace hangs).
    """
    ws = listener.ws
    while True:
        msg = await ws.receive()
        await gate()
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            return
        if msg.type == WSMsgType.PING:  # answered here (not by aiohttp): a hung relay is mute
            await ws.pong(msg.data)
            continue
        if msg.type == WSMsgType.PONG:
            continue
        try:
            await _take(listener, msg, pending, renew)
        except ConnectionResetError:  # closed between a response and its body: gone
            return
        except p.ProtocolError as exc:
            code = CLOSE_TOO_BIG if isinstance(exc, _TooBig) else CLOSE_PROTOCOL_ERROR
            _LOG.warning("namespace %s: closing a listener's control channel (%d): %s",
                         namespace, code, exc)
            await ws.close(code=code, message=str(exc)[:120].encode())
            return
        except AuthError as exc:
            _LOG.warning("namespace %s: closing a listener's control channel (%d): %s",
                         namespace, p.CLOSE_TOKEN_EXPIRED, exc)
            await ws.close(code=p.CLOSE_TOKEN_EXPIRED, message=str(exc)[:120].encode())
            return
        except Exception:  # the relay's own fault: the listener should reconnect
            _LOG.exception("namespace %s: a listener's control channel failed", namespace)
            await ws.close(code=p.CLOSE_SERVICE_ERROR, message=b"service error")
            return


async def _take(listener: Listener, msg: WSMessage, pending: dict[str, Pending],
                renew: Renew) -> None:
    if msg.type != WSMsgType.TEXT:
        raise p.ProtocolError("expected a text control frame, got a binary one")
    message = p.decode(msg.data)
    if isinstance(message, p.RenewToken):
        renew(listener, message)
    elif isinstance(message, p.Response):
        body = await read_body(listener.ws) if message.body else b""
        check_inline(message, body)
        waiting = pending.get(message.request_id)
        if waiting is not None and not waiting.answer.done():
            waiting.answer.set_result((message, body))
    else:
        raise p.ProtocolError(f"a listener may not send {type(message).__name__}")


def check_inline(response: p.Response, body: bytes) -> None:
    """Refuse a response on the control channel that the protocol sends by rendezvous.

    Raises:
        ProtocolError: a body over 64 KB or headers over 32 KB.
    """
    if len(body) > p.INLINE_BODY_LIMIT:
        raise _TooBig(f"a response body of {len(body)} bytes sent inline: over "
                      f"{p.INLINE_BODY_LIMIT} bytes, the protocol requires the rendezvous "
                      "socket")
    size = p.headers_size(response.response_headers)
    if size > p.INLINE_HEADERS_LIMIT:
        raise _TooBig(f"response headers of {size} bytes sent inline: over "
                      f"{p.INLINE_HEADERS_LIMIT} bytes, the protocol requires the "
                      "rendezvous socket")
