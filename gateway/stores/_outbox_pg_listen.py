"""Waking a PostgreSQL outbox's dispatcher: ``LISTEN`` on a connection of its own.

``PostgresOutbox.add`` calls ``pg_notify`` in the statement that adds the row, and the
server delivers the notification when (and only if) the application's transaction
commits. The dispatcher's wait listens for it on one connection, opened on the event
loop that waits (made again when another loop waits, or after it was lost); while that
connection cannot be made, the wait is a plain sleep (the dispatcher polls) and it is
tried again every few seconds, with one warning per outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["Listener"]

logger = logging.getLogger("geogateway")

_RETRY = 5.0  # seconds between tries to listen again, once it failed


class Listener:
    """Notifications on ``channel``, through a connection made like ``pool``'s."""

    def __init__(self, pool: ConnectionPool[Any], channel: str, where: str) -> None:
        self._pool, self._channel, self._where = pool, channel, where
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._again_at = 0.0  # while listening fails: when to try again

    async def wait(self, seconds: float) -> bool:
        """True once a notification came, False after ``seconds`` seconds."""
        if time.monotonic() < self._again_at:
            await anyio.sleep(seconds)
            return False
        import psycopg

        got = False
        try:
            conn = await self._connection()
            async for _ in conn.notifies(timeout=seconds, stop_after=1):
                got = True
        except psycopg.Error as exc:
            if not self._again_at:
                logger.warning("outbox at %s: listening for new rows failed (%s); polling "
                               "until it works again", self._where,
                               " ".join(str(exc).split())[:200])
            self.close()
            self._again_at = time.monotonic() + _RETRY
            await anyio.sleep(seconds)
            return False
        self._again_at = 0.0
        return got

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        import psycopg

        loop = asyncio.get_running_loop()
        if self._conn is not None and self._loop is not loop:
            self.close()
        if self._conn is None:
            pool = self._pool
            conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
            kwargs = (pool.kwargs() if callable(pool.kwargs) else pool.kwargs) or {}
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **kwargs)
            await conn.execute(f'LISTEN "{self._channel}"')
            self._conn, self._loop = conn, loop
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.pgconn.finish()  # sync: the loop it lives on may be gone
            self._conn = None
