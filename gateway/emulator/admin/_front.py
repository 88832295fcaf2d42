"""The administration API on a namespace's own port, beside AMQP.

Why the same port: ``ServiceBusAdministrationClient.from_connection_string`` sends its
requests to the connection string's ``Endpoint`` host *and port*, over HTTPS (the Python
SDK ignores ``UseDevelopmentEmulator`` for its URL; .NET's uses plain HTTP there). A port
beside the AMQP one would need a second connection string; on the same port the one the
emulator prints serves both clients unchanged.

How: the first bytes of a connection tell the protocols apart. AMQP begins with ``AMQP``,
a TLS handshake with byte 0x16, an HTTP request with its method's capital letter (one
asking for a WebSocket upgrade is AMQP over WebSockets, left to the AMQP side). An
AMQP connection gets its bytes back (``StreamReader.feed_data`` on an empty buffer) and
goes on as before; any other is relayed, bytes as they come, to one of two uvicorn
servers on loopback ports of this process (one speaking HTTPS with the emulator's
certificate, :mod:`._tls`, one plain HTTP), started at the first such connection so that
an emulator nobody administers pays nothing but the look at its first bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gateway.emulator.admin._app import AdminNamespace, create_app

__all__ = ["AdminFront"]

_LOG = logging.getLogger("gateway.emulator")
_TLS_HANDSHAKE = 0x16
_HTTP_FIRST = frozenset(b"GPDHOCT")  # GET PUT POST PATCH DELETE HEAD OPTIONS CONNECT TRACE
#: A WebSocket upgrade is AMQP over WebSockets, not the API: the AMQP side has it.
_WEBSOCKET = b"upgrade: websocket"
#: Far more than a client sends before its first answer: read at once, given back whole.
_FIRST_READ = 1 << 20


class AdminFront:
    """Takes the non-AMQP connections of one namespace to its administration API.

    Args:
        namespace: the namespace served.
        certificate: the (certificate, key) PEM files for HTTPS.
        state: the namespace's control state now (``down``, ``hang``): a request is
            not answered while it hangs (the connection is closed when the hang ends, as
            AMQP ones are), and its connections close when it goes down.
    """

    def __init__(self, namespace: AdminNamespace, certificate: tuple[Path, Path], *,
                 state: Callable[[], Any]) -> None:
        self.namespace = namespace
        self.certificate = certificate
        self._state = state
        self._ports: dict[bool, int] = {}
        self._servers: list[tuple[Any, asyncio.Task[None]]] = []
        self._starting: asyncio.Lock | None = None
        self._relays: set[asyncio.StreamWriter] = set()
        self._waiting: set[asyncio.StreamWriter] = set()
        self._closed = False

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Look at a new connection's first bytes: True to serve it as AMQP (its bytes
        given back), False when this front took it (or it closed)."""
        if self._closed:  # the emulator is shutting down
            writer.close()
            return False
        self._waiting.add(writer)  # closed with the front, as AMQP connections are
        try:
            first = await reader.read(_FIRST_READ)
        except ConnectionError:
            first = b""
        finally:
            self._waiting.discard(writer)
        if not first:
            writer.close()
            return False
        is_tls = first[0] == _TLS_HANDSHAKE
        amqp = not is_tls and (first[0] not in _HTTP_FIRST or _WEBSOCKET in first.lower())
        if amqp or self._state().hang:
            reader.feed_data(first)  # nothing arrived since: the buffer was emptied above
            return True
        try:
            port = await self._port(tls=is_tls)
        except (OSError, ImportError) as exc:
            _LOG.error("namespace %s: the administration API cannot start: %s",
                       self.namespace.name, exc)
            writer.close()
            return False
        await self._relay(first, reader, writer, port)
        return False

    async def _relay(self, first: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, port: int) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        self._relays.update((writer, up_writer))
        up_writer.write(first)
        pumps = [asyncio.ensure_future(self._requests(reader, up_writer)),
                 asyncio.ensure_future(_pump(up_reader, writer))]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                self._relays.discard(w)
                w.close()

    async def _requests(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        # The client's bytes, dropped while the namespace hangs; the connection ends when
        # it goes down or a hang it saw is over.
        stalled = False
        with contextlib.suppress(ConnectionError):
            while data := await source.read(1 << 16):
                state = self._state()
                if state.down or (stalled and not state.hang):
                    return
                if state.hang:
                    stalled = True
                    continue
                sink.write(data)
                await sink.drain()

    async def _port(self, *, tls: bool) -> int:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if tls not in self._ports:
                self._ports[tls] = await self._start(tls)
        return self._ports[tls]

    async def _start(self, tls: bool) -> int:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        cert, key = self.certificate
        config = uvicorn.Config(
            create_app(self.namespace), log_config=None, log_level="warning",
            access_log=False, lifespan="off", timeout_graceful_shutdown=1,
            ssl_certfile=str(cert) if tls else None, ssl_keyfile=str(key) if tls else None)
        server = _server(config)
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():  # noqa: ASYNC110 (a flag only)
            await asyncio.sleep(0.005)
        if task.done():
            sock.close()
            task.result()  # raises what stopped it
            raise OSError("the HTTP server stopped at once")
        self._servers.append((server, task))
        return int(sock.getsockname()[1])

    async def aclose(self) -> None:
        """Close the connections not yet handed over, the relayed ones, and stop the
        HTTP servers."""
        self._closed = True
        for writer in [*self._waiting, *self._relays]:
            writer.close()
        for server, _ in self._servers:
            server.should_exit = server.force_exit = True
        await asyncio.gather(*(task for _, task in self._servers), return_exceptions=True)
        self._servers.clear()
        self._ports.clear()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # The emulator's process handles its signals: uvicorn's would take them.
            yield

    return Server


def _server(config: Any) -> Any:
    return _server_class()(config)
