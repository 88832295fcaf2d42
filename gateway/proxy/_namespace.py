"""The proxy's one namespace: a listening socket whose connections are the shared AMQP
front (:mod:`gateway.amqp.server`) and whose router binds links to the geo back end.

Unlike an emulated namespace it has no control file: it is never down and never hangs
(the namespaces behind it are, and the geo sender and receivers deal with that), so
:meth:`ProxyNamespace.refresh` and :meth:`ProxyNamespace.delay` do nothing; nor does it
know which entities exist behind it, so ``$cbs`` grants a valid token for any.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from typing import Any

from gateway._support.tasks import OwnedTasks
from gateway.amqp.server import Connection, LinkRouter, Policy
from replication import ConfigError

__all__ = ["ProxyNamespace"]

_LOG = logging.getLogger("gateway.proxy")
#: How long closing waits for the links' work before it cancels it (seconds).
_CLOSE_WAIT = 5.0


class ProxyNamespace:
    """The namespace clients of a proxy see, served on ``host:port``."""

    product = "geogateway-proxy"
    log = _LOG

    def __init__(self, name: str, *, host: str, port: int, policies: Sequence[Policy]) -> None:
        self.name = name
        self.host = host
        self.port = port
        #: The shared access policies clients sign with, the default one (every right) first.
        self.policies = tuple(policies)
        self._router: LinkRouter | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks = OwnedTasks(_LOG, "proxy task failed")

    async def listen(self, router: LinkRouter, *, tls: ssl.SSLContext | None = None) -> None:
        """Listen on ``host:port`` (port 0: a free one, then kept in :attr:`port`), over
        TLS when ``tls`` is given (amqps).

        Raises:
            ConfigError: the address cannot be listened on.
        """
        self._router = router
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, ssl=tls)
        except OSError as exc:
            raise ConfigError(f"the proxy cannot listen on {self.host}:{self.port}: "
                              f"{exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop_listening(self) -> None:
        """Accept no new connection (those open go on)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    @property
    def router(self) -> LinkRouter:
        """What binds each new link to its node (given to :meth:`listen`)."""
        assert self._router is not None, "listen() first"
        return self._router

    async def aclose(self) -> None:
        """Close every connection and cancel what is left of the links' work."""
        await self.stop_listening()
        for conn in list(self._connections):
            conn.close("amqp:connection:forced", "the proxy is shutting down")
        # The links end with their connections: let their work finish (a receiver link
        # closes its geo receiver and the connections it opened), then cancel the rest.
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=_CLOSE_WAIT)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by the namespace (cancelled when it closes)."""
        return self._tasks.spawn(coro)

    async def delay(self) -> None:
        """No injected latency: the namespaces behind the proxy have their own."""

    def refresh(self) -> None:
        """Nothing to look at: the proxy itself is never down and never hangs."""

    async def exists(self, entity: str) -> bool:
        """Every entity may exist: the proxy does not know which do behind it (a send to
        one that does not is refused then, as the namespaces refuse it)."""
        return True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        self._connections.add(conn)
        try:
            await conn.serve()
        finally:
            self._connections.discard(conn)
