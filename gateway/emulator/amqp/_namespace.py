"""One emulated namespace: a listening socket over one local namespace's file.

The socket serves AMQP and AMQP over WebSockets (``/$servicebus/websocket``), told
apart by a connection's first byte: ``gateway.amqp.server._websocket`` says why one
port serves both.

The entities live in the local namespace's SQLite file (``local://NAME`` and the
emulated ``NAME`` share them). The file is used from the event loop itself: its
transactions take tens of microseconds, while handing each one to a worker thread
cost several times that in CPU (thread switches and the GIL). The price is that
while another process holds the file's write lock (a ``local://`` client's
transaction, normally well under a millisecond) the loop waits for it. Sends from
all links in one turn of the loop are committed in one transaction. Readers
waiting for messages wake when this emulator wrote, when the file changed on disk
(another process wrote), and on a short tick (lock expiry).

The namespace watches its control file: while it says ``down`` the listener is
closed (clients get "connection refused") and every connection is closed with
``amqp:connection:forced``; its port stays bound without listening, so that no other
program picking a free port takes it meanwhile and "up" listens on it again;
``latency`` delays every reply; ``lost_replies`` drops the disposition of that share
of stored sends.

``hang`` is a frozen front end: connections are still accepted (TCP), but no frame
is sent on any connection, old or new (no protocol header, open, attach, flow,
disposition, delivery, management or ``$cbs`` reply, no heartbeat), and nothing a
client sends is handled, so a send made while the namespace hangs is never stored
(one whose transfer was handled just before may be stored, its disposition never
sent: its outcome is unknown, as on the service). Readers take no message from the
queue. When the hang is cleared, every connection that was open during it is closed
with ``amqp:connection:forced`` (a front end that came back has lost its
connections), and clients reconnect at their next operation; resuming them instead
would hand the SDKs replies to operations they gave up on. The hang takes effect on
a connection when it next reads (the control file is looked at then, at most once a
millisecond), and everywhere within the control file's poll interval. A hung
namespace still completes a WebSocket handshake, as it accepts a TCP connection, and
then sends no frame on the AMQP connection over it (WebSocket pings are answered).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from gateway._support.tasks import OwnedTasks
from gateway.amqp.server import Connection, Policy, websocket
from gateway.emulator._config import SERVICE_BUS_MAX_MESSAGE_SIZE, EventHubSpec, QueueSpec
from gateway.emulator._servicebus_config import TopicSpec
from gateway.emulator.amqp._declare import declare
from gateway.emulator.amqp._router import Router
from gateway.emulator.amqp._topics import AmqpSections
from gateway.transports import (
    DEAD_LETTER_SUFFIX,
    ControlFile,
    ControlState,
    Queued,
    Store,
    split_subscription,
)
from gateway.transports.local import namespace_files
from replication import ConfigError, GatewayError, Message

__all__ = ["Namespace"]

T = TypeVar("T")
_LOG = logging.getLogger("gateway.emulator")
#: How often the control file and the namespace file are looked at (seconds).
_CONTROL_POLL, _FILE_POLL = 0.1, 0.02
#: Seconds a closing namespace waits for its cancelled tasks (then says which did not end).
_CLOSE_WAIT = 5.0
#: The least time between two looks at the control file by :meth:`Namespace.refresh`.
_REFRESH = 0.001


def _key(entity: str) -> str:
    # Readers of a queue and of its dead-letter sub-queue wake on the same changes; those
    # of a topic's subscriptions on the topic's (a send to the topic writes to them).
    base = entity.lower().removesuffix(DEAD_LETTER_SUFFIX.lower())
    subscription = split_subscription(base)
    return base if subscription is None else subscription[0]


class Namespace:
    """One namespace served on ``host:port`` (port 0: a free one, kept until closed)."""

    #: The server's name in each connection's Open; where the front logs.
    product = "geogateway-emulator"
    log = _LOG

    def __init__(self, name: str, port: int, *, host: str, data_dir: str | None,
                 policies: Sequence[Policy], queues: Sequence[QueueSpec],
                 event_hubs: Sequence[EventHubSpec],
                 max_message_size: int = SERVICE_BUS_MAX_MESSAGE_SIZE,
                 topics: Sequence[TopicSpec] = ()) -> None:
        self.name = name
        #: The largest Service Bus message accepted (a queue's own limit may be smaller).
        self.max_message_size = max_message_size
        self.host = host
        self.port = port
        #: The shared access policies, the default one (every right) first.
        self.policies = tuple(policies)
        self.db_path, control = namespace_files(name, data_dir)
        self.store = Store(self.db_path, namespace=name, auto_create=False,
                           codec=AmqpSections())
        self.control = ControlFile(control)
        self.state = ControlState()
        self.router = Router(self)
        self.rng = random.Random()
        self.created = time.time()
        #: The readers of each event hub partition: (hub, consumer group, partition) -> readers.
        self.owners: dict[tuple[str, str, str], list[Any]] = {}
        self._queues, self._event_hubs = tuple(queues), tuple(event_hubs)
        self._topics = tuple(topics)
        self._server: asyncio.Server | None = None
        #: While down: the port's addresses, bound and not listening (see the docstring).
        self._held: list[socket.socket] = []
        self._connections: set[Connection] = set()
        self._opening: set[asyncio.StreamWriter] = set()  # accepted, protocol not yet known
        self._tasks = OwnedTasks(_LOG, f"emulator task failed in namespace {self.name}")
        self._changed: dict[str, asyncio.Event] = {}
        self._file_stamp: tuple[int, ...] = ()
        self._pending: list[tuple[str, str | None, Sequence[Message | Queued],
                                  Callable[[GatewayError | None], None]]] = []
        self._flushing = False
        self._looked = 0.0  # when refresh() last read the control file (monotonic)
        #: Looks at a new connection first: True to serve it as AMQP, False when it took
        #: it (the administration API, on this same port: ``emulator.admin``).
        self.front: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                             Awaitable[bool]] | None = None
        #: The entities its start leaves as they are (lower-case paths; the ones the
        #: administration API created or changed), read from the store.
        self.kept: Callable[[Store], Collection[str]] | None = None

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Create the declared entities, then listen (and stop again if the namespace is down).

        Raises:
            ConfigError: an entity exists with other settings, or the port is in use.
        """
        await self.run(self._create_entities)
        self.state = self.control.read()
        self._file_stamp = self._stat()
        await self._listen()  # even when down: it fixes the port that "up" will use
        if self.state.down:
            await self._stop_serving("amqp:connection:forced", f"namespace {self.name} is down",
                                     hold=True)
        self.spawn(self._watch_control())
        self.spawn(self._watch_file())

    def _create_entities(self) -> None:
        kept = self.kept(self.store) if self.kept is not None else ()
        declare(self.store, queues=self._queues, event_hubs=self._event_hubs,
                topics=self._topics, kept=kept)

    async def _listen(self) -> None:
        self._release()
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
        except OSError as exc:
            raise ConfigError(f"namespace {self.name}: cannot listen on {self.host}:"
                              f"{self.port}: {exc.strerror or exc}") from None
        # Keep the port an ephemeral request got, so that down/up keeps the address.
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        """Close the listener, every connection and the namespace file."""
        await self._stop_serving("amqp:connection:forced", "the emulator is shutting down")
        self._release()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_CLOSE_WAIT)
            for task in pending:  # closing must end: say what did not, and go on
                _LOG.warning("namespace %s: a task did not end within %.0f s of closing: %r",
                             self.name, _CLOSE_WAIT, task.get_coro())
        self.store.close()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store operation (on the event loop: see the module docstring)."""
        return fn(*args, **kwargs)

    async def exists(self, entity: str) -> bool:
        """Whether the store declares the entity at lower-case path ``entity``."""
        return await self.run(self.store.find, entity) is not None

    async def _stop_serving(self, condition: str, description: str, *,
                            hold: bool = False) -> None:
        server, self._server = self._server, None
        addresses = [(sock.family, sock.getsockname()) for sock in server.sockets] if (
            server is not None and hold) else []
        if server is not None:
            server.close()
        for conn in list(self._connections):
            conn.close(condition, description)
        for writer in list(self._opening):
            writer.close()
        if server is not None:
            await server.wait_closed()
        for family, address in addresses:
            self._hold(family, address)

    def _hold(self, family: int, address: Any) -> None:
        # Bound, not listening: a connection is refused, and a program that asks the
        # system for a free port is not given this one.
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError as exc:
            sock.close()
            _LOG.debug("namespace %s: could not hold port %s while down: %s",
                       self.name, self.port, exc)
            return
        self._held.append(sock)

    def _release(self) -> None:
        held, self._held = self._held, []
        for sock in held:
            sock.close()

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` as a task owned by the namespace (cancelled when it closes)."""
        return self._tasks.spawn(coro)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.state.down:
            writer.close()
            return
        # The administration API's front takes HTTP and TLS (it gives the bytes of
        # anything else back); then AMQP or a WebSocket upgrade: the first byte tells
        # (``A`` or ``G``; see gateway.amqp.server._websocket).
        if self.front is not None:
            self._opening.add(writer)  # closed if the namespace goes down meanwhile
            try:
                if not await self.front(reader, writer):
                    return
            finally:
                self._opening.discard(writer)
        if self.state.down:  # it went down while the front looked
            writer.close()
            return
        self._opening.add(writer)
        try:
            first = await reader.read(1 << 16)
            ws = await websocket.accept(reader, writer, first, name=self.name) \
                if first[:1] == b"G" else None
        except ConnectionError:
            first, ws = b"", None
        finally:
            self._opening.discard(writer)
        if not first or (first[:1] == b"G" and ws is None) or self._server is None:
            writer.close()  # gone, refused, or the namespace went down meanwhile
            return
        conn = Connection(self, reader, writer) if ws is None else Connection(self, ws, ws)
        if self.refresh().hang:
            conn.stall()  # accepted, and never answered
        self._connections.add(conn)
        try:
            await conn.serve(b"" if ws is not None else first)
        finally:
            self._connections.discard(conn)
            if ws is not None:
                await ws.aclose()

    # -- the control file -----------------------------------------------------------

    async def _watch_control(self) -> None:
        while True:
            await asyncio.sleep(_CONTROL_POLL)
            state = self.control.read()
            self._hang(state.hang)
            if state.down and not self.state.down:
                _LOG.info("namespace %s is down", self.name)
                self.state = state
                await self._stop_serving("amqp:connection:forced",
                                         f"namespace {self.name} is down", hold=True)
            elif not state.down and self.state.down:
                _LOG.info("namespace %s is up", self.name)
                self.state = state
                with contextlib.suppress(ConfigError):  # retried at the next poll
                    await self._listen()
                if self._server is None:
                    self.state = dataclasses.replace(state, down=True)
            else:
                self.state = state

    def refresh(self) -> ControlState:
        """The state, with a hang that began or ended since the last look applied now.

        One ``os.stat`` of the control file (it is parsed again only when it changed),
        at most once a millisecond: a stat costs several microseconds, and connections
        call this for every chunk they read.
        """
        now = time.monotonic()
        if now - self._looked >= _REFRESH:
            self._looked = now
            self._hang(self.control.read().hang)
        return self.state

    def _hang(self, hang: bool) -> None:
        if hang == self.state.hang:
            return
        self.state = dataclasses.replace(self.state, hang=hang)
        if hang:
            _LOG.info("namespace %s hangs: connections are accepted, nothing is answered",
                      self.name)
            for conn in self._connections:
                conn.stall()
            return
        stalled = [conn for conn in self._connections if conn.stalled]
        _LOG.info("namespace %s no longer hangs: closing the %d connections it stalled",
                  self.name, len(stalled))
        for conn in stalled:
            conn.close("amqp:connection:forced",
                       f"namespace {self.name} was hung: reconnect")

    async def delay(self) -> None:
        """Wait out the injected latency, if any."""
        if self.state.latency > 0:
            await asyncio.sleep(self.state.latency)

    def lose_reply(self) -> bool:
        """Whether to drop this reply (the injected ``lost_replies`` share)."""
        p = self.state.lost_replies
        return p > 0 and self.rng.random() < p

    # -- the namespace file ---------------------------------------------------------

    def changed(self, entity: str) -> asyncio.Event:
        """An event set at the next change of ``entity`` (a queue and its DLQ are one).

        Take it before looking, then wait on it, so that no change is missed.
        """
        key = _key(entity)
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = asyncio.Event()
        return event

    def notify(self, entities: Iterable[str] | None = None) -> None:
        """Wake those waiting for a change of ``entities`` (None: of any entity)."""
        keys = list(self._changed) if entities is None else {_key(e) for e in entities}
        for key in keys:
            event = self._changed.pop(key, None)
            if event is not None:
                event.set()

    def _stat(self) -> tuple[int, ...]:
        stamp: list[int] = []
        for path in (self.db_path, self.db_path + "-wal"):
            try:
                st = os.stat(path)
            except OSError:
                stamp += (0, 0)
            else:
                stamp += (st.st_mtime_ns, st.st_size)
        return tuple(stamp)

    async def _watch_file(self) -> None:
        # Another process appending changes the file (WAL) on disk; ours are notified
        # directly and their stamp is taken right after, so they do not wake twice.
        while True:
            await asyncio.sleep(_FILE_POLL)
            stamp = self._stat()
            if stamp != self._file_stamp:
                self._file_stamp = stamp
                self.notify()

    def wrote(self, entities: Iterable[str]) -> None:
        """This emulator changed ``entities``: wake their readers (and only them)."""
        self._file_stamp = self._stat()
        self.notify(entities)

    # -- sends, committed together --------------------------------------------------

    def append(self, entity: str, partition_id: str | None,
               messages: Sequence[Message | Queued],
               done: Callable[[GatewayError | None], None]) -> None:
        """Store messages in ``entity`` (one partition of it when ``partition_id`` is set).

        The appends of one turn of the event loop, from every link, are committed in
        one transaction (each all or none); ``done`` then gets each one's error or None.
        """
        self._pending.append((entity, partition_id, messages, done))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        batch, self._pending = self._pending, []
        try:
            results = self.store.send_many([b[:3] for b in batch], time.time())
        except GatewayError as exc:
            results = [exc] * len(batch)
        self.wrote(entity for entity, *_ in batch)
        for (*_, done), result in zip(batch, results, strict=True):
            done(result)
