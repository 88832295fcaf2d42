"""AMQP over WebSockets, on a namespace's own port (RFC 6455, the AMQP WebSocket binding).

Clients behind firewalls use ``TransportType.AmqpOverWebsocket``: the SDKs send an HTTP
``GET /$servicebus/websocket`` upgrade offering the subprotocol ``AMQPWSB10``, then
carry the AMQP byte stream (protocol headers and frames) in binary WebSocket messages.

Why the same port as AMQP. Neither SDK dials a non-standard port for WebSockets from
the connection string alone: with ``UseDevelopmentEmulator=true`` they use plain
``ws://`` but drop the endpoint's port (the sync transport dials
``ws://HOST/$servicebus/websocket``, port 80; the async one ``ws://HOST:443/...``).
``custom_endpoint_address="sb://HOST:PORT"`` is what makes them dial ``PORT``, so
serving both protocols on the namespace's one port lets that be the connection
string's own endpoint: one address per namespace, nothing more to configure or
print. The first byte tells them apart: an AMQP client opens with ``AMQP`` (``A``),
a WebSocket client with ``GET `` (``G``); a plain AMQP connection pays nothing more.

:func:`accept` answers the handshake and returns a :class:`WebSocketStream`, whose
``read`` and ``write`` carry the AMQP byte stream, so that the AMQP connection reads
and writes it as it does a TCP stream. A refused handshake gets one clear HTTP answer
(404 for another path, 426 for a request that is no WebSocket upgrade or another
version, 400 for a missing key or subprotocol, 405 for another method) and a closed
socket. Once upgraded, a peer that breaks RFC 6455 (an unmasked frame, reserved bits,
a fragmented or oversized control frame, a continuation out of place, an unknown
opcode: 1002; a text message, which the binding does not carry: 1003; a message over
:data:`MAX_MESSAGE_SIZE`: 1009) gets a close frame with that code and reason, and its
socket is closed: only that connection ends, with one log line.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import logging
import struct

__all__ = ["MAX_MESSAGE_SIZE", "PATH", "SUBPROTOCOL", "WebSocketStream", "accept",
           "handshake"]

_LOG = logging.getLogger("gateway.emulator")

#: The request path and the subprotocol of the AMQP WebSocket binding, as the SDKs send them.
PATH, SUBPROTOCOL = "/$servicebus/websocket", "AMQPWSB10"
#: The largest WebSocket message accepted: twice the largest AMQP frame the emulator
#: accepts (1 MiB), as a client may put a frame and what follows it in one message.
MAX_MESSAGE_SIZE = 2 << 20
#: The largest handshake request (request line and headers).
_MAX_HEAD = 16 << 10
#: How long a close frame we sent waits for the peer's before the socket is closed.
CLOSE_GRACE = 1.0
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CONTINUATION, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_PROTOCOL_ERROR, _UNSUPPORTED, _BAD_DATA, _TOO_BIG = 1002, 1003, 1007, 1009
_NORMAL = 1000


class _Failure(Exception):
    """The peer broke RFC 6455: close with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


def _answer(status: str, reason: str, *headers: str) -> bytes:
    body = reason.encode() + b"\n"
    lines = [f"HTTP/1.1 {status}", *headers, "Content-Type: text/plain; charset=utf-8",
             f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def handshake(head: bytes) -> tuple[bytes, bool]:
    """The answer to a handshake request (its request line and headers), and whether it
    upgrades the connection.

    Accepted: ``GET /$servicebus/websocket`` (any query) with ``Upgrade: websocket``,
    ``Connection: Upgrade``, ``Sec-WebSocket-Version: 13``, a ``Sec-WebSocket-Key`` of 16
    bytes and ``AMQPWSB10`` among the offered subprotocols; the answer is ``101`` with
    the key's ``Sec-WebSocket-Accept`` and the subprotocol echoed. No extension is
    accepted (frames must not set the reserved bits).
    """
    try:
        request, *lines = head.decode("latin-1").split("\r\n")
        method, target, version = request.split(" ")
    except ValueError:
        return _answer("400 Bad Request", "not an HTTP request"), False
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:  # a repeated header's values are joined, as HTTP allows for lists
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers \
                else value.strip()
    if method != "GET" or not version.startswith("HTTP/1."):
        return _answer("405 Method Not Allowed", f"only GET {PATH} is served here",
                       "Allow: GET"), False
    if target.partition("?")[0] != PATH:
        return _answer("404 Not Found", f"no such path: AMQP over WebSockets is at {PATH}"), False
    upgrade = [t.lower() for t in _tokens(headers.get("upgrade", ""))]
    connection = [t.lower() for t in _tokens(headers.get("connection", ""))]
    if "websocket" not in upgrade or "upgrade" not in connection:
        return _answer("426 Upgrade Required", f"{PATH} serves WebSocket upgrades only",
                       "Upgrade: websocket", "Sec-WebSocket-Version: 13"), False
    if headers.get("sec-websocket-version") != "13":
        return _answer("426 Upgrade Required", "only WebSocket version 13 is served",
                       "Upgrade: websocket", "Sec-WebSocket-Version: 13"), False
    key = headers.get("sec-websocket-key", "")
    try:
        valid_key = len(base64.b64decode(key, validate=True)) == 16
    except binascii.Error:
        valid_key = False
    if not valid_key:
        return _answer("400 Bad Request", "Sec-WebSocket-Key must be 16 bytes in base64"), False
    if SUBPROTOCOL not in _tokens(headers.get("sec-websocket-protocol", "")):
        return _answer("400 Bad Request",
                       f"the subprotocol {SUBPROTOCOL} (Sec-WebSocket-Protocol) is required"), False
    accept_key = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
    lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Accept: {accept_key}", f"Sec-WebSocket-Protocol: {SUBPROTOCOL}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), True


def _frame(opcode: int, payload: bytes = b"") -> bytes:
    """One unmasked, final frame, as a server sends it."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _close_payload(code: int, reason: str) -> bytes:
    return struct.pack("!H", code) + reason.encode()[:123]


def _unmask(data: bytes | bytearray, mask: bytes) -> bytes:
    # XOR as one big integer: linear, and far quicker in Python than byte by byte.
    n = len(data)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def _valid_close_code(code: int) -> bool:
    return (1000 <= code <= 1014 and code not in (1004, 1005, 1006)) or \
        3000 <= code <= 4999


class WebSocketStream:
    """A WebSocket connection's binary messages as one byte stream (for an AMQP connection).

    :meth:`read` and :meth:`write`, :meth:`drain`, :meth:`close` and :meth:`is_closing`
    are those of an :class:`asyncio.StreamReader` and :class:`asyncio.StreamWriter`:
    ``read`` returns the payloads of binary messages (fragments included, as they
    arrive) and answers pings and the close handshake itself; ``write`` sends one
    binary message; ``close`` starts the close handshake (the socket closes when the
    peer answers, or after :data:`CLOSE_GRACE` seconds).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 buffered: bytes = b"", max_message_size: int = MAX_MESSAGE_SIZE,
                 name: str = "") -> None:
        self._reader, self._writer = reader, writer
        self._buf = bytearray(buffered)
        self._data, self._pos = b"", 0  # a payload, and how much of it was returned
        self._max = max_message_size
        self._name = name
        self._message: int | None = None  # bytes of the message in progress, None between
        self._close_sent = False
        self._eof = False
        self._timer: asyncio.TimerHandle | None = None

    # -- reading --------------------------------------------------------------------

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes of the stream (any number when ``n`` < 0); b"" at its end."""
        while self._pos >= len(self._data):
            if self._eof:
                return b""
            try:
                self._data, self._pos = await self._next(), 0
            except _Failure as exc:
                self._fail(exc.code, str(exc))
            except (ConnectionError, asyncio.IncompleteReadError):
                self._end()
        if self._pos == 0 and not 0 <= n < len(self._data):
            data, self._data = self._data, b""  # the whole payload, uncopied
            return data
        end = len(self._data) if n < 0 else self._pos + n
        data, self._pos = self._data[self._pos:end], min(end, len(self._data))
        return data

    async def _fill(self, size: int) -> None:
        while len(self._buf) < size:
            chunk = await self._reader.read(1 << 16)
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self._buf), size)
            self._buf += chunk

    async def _next(self) -> bytes:
        """The next data payload (b"" once the stream ended); control frames are answered."""
        while not self._eof:
            await self._fill(2)
            b0, b1 = self._buf[0], self._buf[1]
            fin, opcode, length = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
            if b0 & 0x70:
                raise _Failure(_PROTOCOL_ERROR, "reserved bits set: no extension was negotiated")
            if not b1 & 0x80:
                raise _Failure(_PROTOCOL_ERROR, "a client frame must be masked")
            start = 2
            if length == 126:
                await self._fill(4)
                length, start = struct.unpack_from("!H", self._buf, 2)[0], 4
            elif length == 127:
                await self._fill(10)
                length, start = struct.unpack_from("!Q", self._buf, 2)[0], 10
            self._check(fin, opcode, length)
            await self._fill(start + 4 + length)
            mask = bytes(self._buf[start:start + 4])
            payload = _unmask(self._buf[start + 4:start + 4 + length], mask)
            del self._buf[:start + 4 + length]
            if opcode >= _CLOSE:
                self._control(opcode, payload)
                continue
            self._message = None if fin else (self._message or 0) + length
            if payload:
                return payload
        return b""

    def _check(self, fin: int, opcode: int, length: int) -> None:
        if opcode >= _CLOSE:
            if opcode not in (_CLOSE, _PING, _PONG):
                raise _Failure(_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
            if not fin or length > 125:
                raise _Failure(_PROTOCOL_ERROR, "a control frame must be final and at most "
                                                "125 bytes")
            return
        if opcode == _TEXT:
            raise _Failure(_UNSUPPORTED, "AMQP is carried in binary messages, not text")
        if opcode == _CONTINUATION and self._message is None:
            raise _Failure(_PROTOCOL_ERROR, "a continuation frame with no message to continue")
        if opcode == _BINARY and self._message is not None:
            raise _Failure(_PROTOCOL_ERROR, "a new message before the last one ended")
        if opcode not in (_CONTINUATION, _BINARY):
            raise _Failure(_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if (self._message or 0) + length > self._max:
            raise _Failure(_TOO_BIG, f"a message over {self._max} bytes")

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == _PING:
            self._send(_frame(_PONG, payload))
        elif opcode == _CLOSE:
            code = _NORMAL
            if payload:
                if len(payload) < 2:
                    raise _Failure(_PROTOCOL_ERROR, "a close frame of one byte")
                code = struct.unpack_from("!H", payload)[0]
                if not _valid_close_code(code):
                    raise _Failure(_PROTOCOL_ERROR, f"close code {code} is not allowed")
                try:
                    payload[2:].decode()
                except UnicodeDecodeError:
                    raise _Failure(_BAD_DATA, "a close reason that is not UTF-8") from None
            if not self._close_sent:  # the peer began the close handshake: answer it
                self._close_sent = True
                self._send(_frame(_CLOSE, struct.pack("!H", code)))
            self._end()  # the server closes the TCP connection first

    def _fail(self, code: int, reason: str) -> None:
        _LOG.info("websocket connection to %s failed: %d %s", self._name or "the emulator",
                  code, reason)
        if not self._close_sent:
            self._close_sent = True
            self._send(_frame(_CLOSE, _close_payload(code, reason)))
        self._end()

    def _end(self) -> None:
        self._eof = True
        if self._timer is not None:
            self._timer.cancel()
        self._writer.close()

    # -- writing --------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    def write(self, data: bytes) -> None:
        """Send ``data`` as one binary message (nothing once the close handshake began)."""
        if not self._close_sent:
            self._send(_frame(_BINARY, data))

    def is_closing(self) -> bool:
        """Whether the close handshake began (nothing more is sent)."""
        return self._close_sent or self._writer.is_closing()

    async def drain(self) -> None:
        """Wait while the socket's write buffer is full."""
        await self._writer.drain()

    def close(self) -> None:
        """Begin the close handshake (code 1000); the socket closes within :data:`CLOSE_GRACE`."""
        if self._close_sent:
            return
        self._close_sent = True
        self._send(_frame(_CLOSE, struct.pack("!H", _NORMAL)))
        self._timer = asyncio.get_running_loop().call_later(CLOSE_GRACE, self._end)

    async def aclose(self) -> None:
        """Finish the close handshake (nothing else reads the stream any more), then close.

        Waits up to :data:`CLOSE_GRACE` seconds for the peer's close frame; the socket is
        closed even when this is cancelled.
        """
        try:
            self.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drain_to_close(), CLOSE_GRACE)
        finally:
            self._end()

    async def _drain_to_close(self) -> None:
        while not self._eof:
            await self.read()


async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes, *,
                 name: str = "") -> WebSocketStream | None:
    """Answer the WebSocket handshake whose first bytes are ``first``.

    Returns:
        The upgraded stream, or None when the handshake was refused (answered with an
        HTTP error, the socket closed) or the peer left before finishing it.
    """
    head = bytearray(first)
    while (end := head.find(b"\r\n\r\n")) < 0:
        if len(head) > _MAX_HEAD:
            writer.write(_answer("431 Request Header Fields Too Large",
                                 f"a handshake over {_MAX_HEAD} bytes"))
            writer.close()
            return None
        chunk = await reader.read(1 << 16)
        if not chunk:
            writer.close()
            return None
        head += chunk
    answer, upgraded = handshake(bytes(head[:end]))
    writer.write(answer)
    if not upgraded:
        _LOG.info("websocket handshake to %s refused: %s", name or "the emulator",
                  answer.split(b"\r\n", 1)[0].decode())
        writer.close()
        return None
    return WebSocketStream(reader, writer, buffered=bytes(head[end + 4:]), name=name)
