"""WebSocket helpers of the relay emulator: body frames and sender/listener piping."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import WSMsgType, web

from gateway.relay._protocol import ProtocolError

__all__ = ["pipe", "read_body"]


async def read_body(ws: web.WebSocketResponse) -> bytes:
    """The binary message that follows a control message with ``body: true``.

    Raises:
        ProtocolError: the next message is not binary (or the socket closed).
    """
    msg = await ws.receive()
    if msg.type != WSMsgType.BINARY:
        raise ProtocolError("a control message with body=true must be followed by a "
                            "binary frame")
    data: bytes = msg.data
    return data


async def pipe(a: web.WebSocketResponse, b: web.WebSocketResponse) -> None:
    """Relay messages both ways until one side closes; then close the other alike."""
    tasks = [asyncio.ensure_future(_forward(a, b)), asyncio.ensure_future(_forward(b, a))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ws in (a, b):
            with contextlib.suppress(Exception):
                await ws.close()


async def _forward(src: web.WebSocketResponse, dst: web.WebSocketResponse) -> None:
    async for msg in src:
        if msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        else:
            break
    code = src.close_code or 1000
    await dst.close(code=code if code in (1000, 1001, 1008, 1011) or code >= 3000 else 1000)
