"""One client connection: protocol headers, SASL, open/close, sessions, heartbeats.

The connection reads frames in one task and handles each completely before the
next (work that waits, such as a receiver with nothing to deliver yet, runs in the
link's own task). Frames written during one turn of the event loop leave in one
system call. A malformed frame or a protocol violation closes this connection only,
with the AMQP error condition that describes it; the peer's idle timeout is honoured
with empty frames.

While its namespace hangs a connection is *stalled*: it keeps reading (so that a
peer that gives up is noticed) but handles nothing it reads and sends nothing, not
even heartbeats; the namespace closes it when the hang ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Protocol

from gateway.amqp import (
    AMQP_HEADER,
    FRAME_AMQP,
    FRAME_SASL,
    SASL_HEADER,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Frame,
    FrameError,
    FrameReader,
    Open,
    Performative,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Symbol,
    Transfer,
    encode_frame,
)
from gateway.amqp.server._auth import Grant, Right, entity_path
from gateway.amqp.server._interfaces import ProtocolError
from gateway.amqp.server._session import Session, SessionNamespace

__all__ = ["MAX_FRAME_SIZE", "ByteReader", "ByteWriter", "Connection"]


#: The largest frame the emulator accepts (and advertises in its Open).
MAX_FRAME_SIZE = 1 << 20
_CHANNEL_MAX = 255
_MECHANISMS = ("MSSBCBS", "ANONYMOUS", "PLAIN")
_SESSION_FRAMES = (Begin, Attach, Flow, Transfer, Disposition, Detach, End)
_ids = itertools.count(1)


class ByteReader(Protocol):
    """What a connection reads: an :class:`asyncio.StreamReader`, or a WebSocket's messages."""

    async def read(self, n: int = -1) -> bytes: ...


class ByteWriter(Protocol):
    """What a connection writes: an :class:`asyncio.StreamWriter`, or a WebSocket."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...

    async def drain(self) -> None: ...


class Connection:
    """The server side of one AMQP connection of a namespace."""

    def __init__(self, namespace: SessionNamespace, reader: ByteReader,
                 writer: ByteWriter) -> None:
        self.namespace = namespace
        self.id = next(_ids)
        self.grants: list[Grant] = []
        #: The peer's max-frame-size: no frame we write may be larger.
        self.peer_max_frame_size = 512
        self._reader = reader
        self._writer = writer
        self._frames = FrameReader(max_frame_size=MAX_FRAME_SIZE)
        self._sessions: dict[int, Session] = {}  # by the peer's channel
        self._state = "header"  # header, sasl, amqp-header, open, opened, closed
        self._last_sent = time.monotonic()
        self._out: list[bytes] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._stalled = False
        self.closed = asyncio.Event()

    @property
    def stalled(self) -> bool:
        """Whether the connection was open while its namespace hung (it answers nothing)."""
        return self._stalled

    def stall(self) -> None:
        """The namespace hangs: handle nothing more, send nothing more (until :meth:`close`)."""
        self._stalled = True

    async def wait_closed(self) -> None:
        """Return once the connection is closed and its sessions have ended."""
        await self.closed.wait()

    # -- writing ----------------------------------------------------------------

    def send(self, channel: int, body: Performative | None, frame_type: int = FRAME_AMQP) -> None:
        """Write one frame (buffered; never blocks)."""
        self.write(encode_frame(Frame(frame_type, channel, body)))

    def write(self, data: bytes) -> None:
        """Write raw bytes (frames already encoded), at the end of this turn of the loop.

        The frames written in one turn go out in one system call.
        """
        if self._state == "closed":
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        # A stalled connection's frames are dropped: a hung namespace answers nothing.
        if out and not self._writer.is_closing() and not self._stalled:
            self._last_sent = time.monotonic()
            self._writer.write(out[0] if len(out) == 1 else b"".join(out))

    async def drain(self) -> None:
        """Wait while the socket's write buffer is full (back-pressure for deliveries)."""
        self._flush()
        if self._state != "closed":
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    # -- authorization ------------------------------------------------------------

    def authorized(self, address: str, right: Right | None = None) -> bool:
        """Whether a token put on this connection covers the entity at ``address`` (with
        ``right``, when given)."""
        path, now = entity_path(address), time.time()
        if right is None:
            return any(g.covers(path, now) for g in self.grants)
        return any(g.allows(path, right, now) for g in self.grants)

    # -- the read loop --------------------------------------------------------------

    async def serve(self, first: bytes = b"") -> None:
        """Read and handle frames until the peer or the namespace closes the connection.

        Args:
            first: bytes the namespace already read from the peer (to tell AMQP from a
                WebSocket upgrade), handled before anything else.
        """
        try:
            while self._state != "closed":
                data, first = first or await self._reader.read(1 << 16), b""
                if not data:
                    break
                # A hang that began or ended takes effect before these bytes are handled
                # (one os.stat of the control file); a stalled connection drops them.
                self.namespace.refresh()
                if self._stalled:
                    continue
                # A protocol header is fed on its own: the reader drops what it parsed
                # in a call that fails, and a bad frame right after the header must
                # still be answered as a connection that sent its header.
                if self._state in ("header", "amqp-header") and len(data) > 8:
                    self._feed(data[:8])
                    data = data[8:]
                self._feed(data)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._teardown()

    def _feed(self, data: bytes) -> None:
        if self._state == "closed":
            return
        try:
            items = self._frames.feed(data)
        except FrameError as exc:
            self.close(exc.condition, str(exc))
            return
        for item in items:
            try:
                self._handle(item)
            except ProtocolError as exc:
                self.close(exc.condition, str(exc))
            except Exception:
                # A bug of ours must cost this connection only, never the server.
                self.namespace.log.exception("connection %d to %s failed", self.id,
                                             self.namespace.name)
                self.close("amqp:internal-error", f"the {self.namespace.product} failed")
            if self._state == "closed":
                return

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        """Send Close (with an error when ``condition`` is given) and drop the socket."""
        if self._state == "closed":
            return
        if self._stalled:
            # The Close below is the one frame a stalled connection sends.
            self._out.clear()
            self._stalled = False
        if self._state in ("open", "opened"):
            error = None if condition is None else Error(condition=Symbol(condition),
                                                         description=description)
            if self._state == "open":  # the peer's Open is due first; answer it with ours
                self.send(0, self._open())
            self.send(0, Close(error=error))
        if condition is not None:
            self.namespace.log.info("connection %d to %s closed: %s %s", self.id,
                                    self.namespace.name, condition, description)
        self._flush()
        self._state = "closed"
        self._writer.close()

    def _teardown(self) -> None:
        self._state = "closed"
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for session in list(self._sessions.values()):
            session.ended()
        self._sessions.clear()
        self._writer.close()
        self.closed.set()

    # -- dispatch -------------------------------------------------------------------

    def _handle(self, item: Frame | bytes) -> None:
        if isinstance(item, bytes):
            self._header(item)
        elif item.type == FRAME_SASL:
            self._sasl(item)
        elif item.body is None:
            pass  # a heartbeat
        elif self._state not in ("open", "opened"):
            raise ProtocolError("amqp:not-allowed", f"{type(item.body).__name__} before Open")
        elif isinstance(item.body, _SESSION_FRAMES):
            self._session_frame(item)
        elif isinstance(item.body, Open):
            self._on_open(item.body)
        elif isinstance(item.body, Close):
            self.close()
        else:
            raise ProtocolError("amqp:not-allowed", f"unexpected {type(item.body).__name__}")

    def _header(self, header: bytes) -> None:
        if self._state == "header" and header == SASL_HEADER:
            self.write(SASL_HEADER)
            self.send(0, SaslMechanisms(sasl_server_mechanisms=_MECHANISMS), FRAME_SASL)
            self._state = "sasl"
        elif self._state in ("header", "amqp-header") and header == AMQP_HEADER:
            self.write(AMQP_HEADER)
            self._state = "open"
        else:
            # The spec's answer to an unsupported header: ours, then close the socket.
            self.write(AMQP_HEADER)
            self._flush()
            self._state = "closed"
            self._writer.close()

    def _sasl(self, frame: Frame) -> None:
        body = frame.body
        if self._state != "sasl" or not isinstance(body, SaslInit):
            raise ProtocolError("amqp:not-allowed", "unexpected SASL frame")
        code = 0
        if body.mechanism == "PLAIN":
            code = 0 if self._plain_ok(body.initial_response or b"") else 1
        elif body.mechanism not in _MECHANISMS:
            code = 1
        self.send(0, SaslOutcome(code=code), FRAME_SASL)
        if code:
            self.close()
            return
        self._state = "amqp-header"
        self._frames.expect_header()

    def _plain_ok(self, response: bytes) -> bool:
        # PLAIN: [authzid] NUL authcid NUL passwd: a policy's name and key grant its rights.
        parts = response.split(b"\0")
        if len(parts) != 3:
            return False
        for policy in self.namespace.policies:
            if parts[1] == policy.name.encode() and parts[2] == policy.key.encode():
                self.grants.append(Grant(path=policy.scope, expires=float("inf"),
                                         rights=policy.rights))
                return True
        return False

    def _on_open(self, body: Open) -> None:
        if self._state != "open":
            raise ProtocolError("amqp:illegal-state", "a second Open")
        self.peer_max_frame_size = max(512, min(body.max_frame_size, MAX_FRAME_SIZE))
        self.send(0, self._open())
        self._state = "opened"
        if body.idle_time_out:
            # Send something at least twice per peer idle timeout.
            interval = max(0.01, body.idle_time_out / 2000)
            self._heartbeat = asyncio.create_task(self._beat(interval))

    def _open(self) -> Open:
        product = self.namespace.product
        return Open(container_id=f"{product}-{self.namespace.name}",
                    hostname=None, max_frame_size=MAX_FRAME_SIZE, channel_max=_CHANNEL_MAX,
                    idle_time_out=None, properties={"product": product})

    async def _beat(self, interval: float) -> None:
        empty = encode_frame(Frame(FRAME_AMQP, 0, None))
        while self._state != "closed":
            idle = time.monotonic() - self._last_sent
            if idle >= interval:
                self.write(empty)
                idle = 0.0
            await asyncio.sleep(interval - idle)

    def _session_frame(self, frame: Frame) -> None:
        body = frame.body
        assert body is not None
        if isinstance(body, Begin):
            if frame.channel in self._sessions:
                raise ProtocolError("amqp:illegal-state", f"channel {frame.channel} is in use")
            if len(self._sessions) > _CHANNEL_MAX:
                raise ProtocolError("amqp:resource-limit-exceeded", "too many sessions")
            ours = frame.channel  # the peer's channels are unique, so reuse the number
            self._sessions[frame.channel] = Session(self, ours, frame.channel, body)
            return
        session = self._sessions.get(frame.channel)
        if session is None:
            # The Azure SDKs send their links' Detach after the session's End: ignore
            # what arrives on a channel that is not (or no longer) in use.
            self.namespace.log.debug("%s on unused channel %d ignored", type(body).__name__,
                                     frame.channel)
            return
        if isinstance(body, End):
            del self._sessions[frame.channel]
            session.ended()
            self.send(session.channel, End(error=None))
        else:
            session.handle(body, frame.payload)
