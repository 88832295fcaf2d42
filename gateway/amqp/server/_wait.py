"""Waiting in the delivery pumps of queue and event hub readers: until the first of
several, and while the namespace hangs."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.amqp.server._interfaces import NodeConnection, ServerNamespace

__all__ = ["stalled", "wait_first"]


async def wait_first(waits: list[Any], timeout: float | None) -> None:
    """Wait until the first of ``waits`` (coroutines) finishes, or ``timeout``."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


async def stalled(namespace: ServerNamespace, connection: NodeConnection) -> bool:
    """Whether the namespace hangs: then wait until the stalled connection is closed.

    A hung namespace delivers nothing, so a reader takes no message meanwhile (one
    taken would stay locked, or be lost in receive-and-delete mode); the namespace
    closes the connection when the hang ends.
    """
    namespace.refresh()
    if not connection.stalled:
        return False
    await connection.wait_closed()
    return True
