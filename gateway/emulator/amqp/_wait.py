"""Waiting in the delivery pumps of queue and event hub readers: until the first of several."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["wait_first"]


async def wait_first(waits: list[Any], timeout: float | None) -> None:
    """Wait until the first of ``waits`` (coroutines) finishes, or ``timeout``."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
