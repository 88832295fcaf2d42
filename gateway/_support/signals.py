"""The stop signal of a long-running command: SIGINT and SIGTERM set one event."""

from __future__ import annotations

import asyncio
import contextlib
import signal

__all__ = ["stop_on_signals"]


def stop_on_signals() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets, on the running loop (where the platform
    lets asyncio handle signals: not on Windows, where Ctrl-C stays KeyboardInterrupt)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop
