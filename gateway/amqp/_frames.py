"""AMQP 1.0 framing for the geogateway emulator: protocol headers and frames.

A frame is an 8-byte header (size, data offset in 4-byte words, type, channel), an
optional extended header, then the body: one performative and, for a transfer, the
message payload after it. A frame without a body is a heartbeat.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from gateway.amqp._codec import DecodeError, Described, decode
from gateway.amqp._performative_codec import encode_performative_into, from_described
from gateway.amqp._performatives import (
    AMQP_PERFORMATIVES,
    SASL_PERFORMATIVES,
    Performative,
    Transfer,
)

__all__ = [
    "AMQP_HEADER",
    "DECODE_ERROR",
    "FRAME_AMQP",
    "FRAME_SASL",
    "FRAMING_ERROR",
    "MIN_MAX_FRAME_SIZE",
    "SASL_HEADER",
    "Frame",
    "FrameError",
    "FrameReader",
    "encode_frame",
    "encode_transfer_frames",
]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
FRAME_AMQP = 0
FRAME_SASL = 1
MIN_MAX_FRAME_SIZE = 512
#: Error conditions a FrameError carries.
DECODE_ERROR = "amqp:decode-error"
FRAMING_ERROR = "amqp:connection:framing-error"

_HEADER = struct.Struct(">IBBH")
_AMQP_AS_SIZE = int.from_bytes(b"AMQP", "big")  # a protocol header where a frame starts
_ALLOWED = {FRAME_AMQP: AMQP_PERFORMATIVES, FRAME_SASL: SASL_PERFORMATIVES}


class FrameError(ValueError):
    """A frame that cannot be read; close the connection with ``condition``."""

    def __init__(self, message: str, condition: str = FRAMING_ERROR) -> None:
        super().__init__(message)
        self.condition = condition


@dataclass(frozen=True)
class Frame:
    """One frame. ``body`` None is an empty (heartbeat) frame.

    ``payload`` is what follows the performative in the body: a transfer's message bytes.
    """

    type: int
    channel: int
    body: Performative | None
    payload: bytes = b""


class FrameReader:
    """Splits an incoming byte stream into protocol headers and frames.

    The reader expects a protocol header first, and again after ``expect_header()``.
    Eight bytes starting with ``AMQP`` where a frame should start are also read as a
    header (no frame can be that large), so a client that pipelines its AMQP header
    behind the SASL exchange is understood. Headers are returned as raw ``bytes``; the
    caller checks them against ``AMQP_HEADER`` / ``SASL_HEADER``.
    """

    def __init__(self, max_frame_size: int = 1 << 20) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._expect_header = True
        self._error: FrameError | None = None

    @property
    def max_frame_size(self) -> int:
        """The largest frame accepted; larger ones raise FrameError."""
        return self._max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        if value < MIN_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be at least {MIN_MAX_FRAME_SIZE}")
        self._max_frame_size = value

    def expect_header(self) -> None:
        """Read the next 8 bytes as a protocol header (after the SASL exchange)."""
        self._expect_header = True

    def feed(self, data: bytes) -> list[Frame | bytes]:
        """Add received bytes; return the headers and frames now complete.

        Raises:
            FrameError: the stream is malformed. Frames before the bad one in the same
                call are dropped, and every later call raises the same error.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        try:
            buf += data
        except BufferError:
            # A slice of the buffer from an earlier parse is still referenced (by
            # garbage not yet collected, such as a caught exception's traceback): a
            # buffer with live exports cannot be resized in place, so replace it.
            buf = self._buf = buf + data
        items: list[Frame | bytes] = []
        try:
            with memoryview(buf) as view:
                consumed = self._parse(view, items)
        except FrameError as exc:
            self._error = exc
            raise
        try:
            del buf[:consumed]
        except BufferError:  # as above
            self._buf = buf[consumed:]
        return items

    def _parse(self, view: memoryview, items: list[Frame | bytes]) -> int:
        pos, end = 0, len(view)
        while end - pos >= 8:
            size, doff, frame_type, channel = _HEADER.unpack_from(view, pos)
            if self._expect_header or size == _AMQP_AS_SIZE:
                items.append(bytes(view[pos : pos + 8]))
                self._expect_header = False
                pos += 8
                continue
            self._check_header(size, doff, frame_type)
            if end - pos < size:
                break
            items.append(_read_frame(view[pos + 4 * doff : pos + size], frame_type, channel))
            pos += size
        return pos

    def _check_header(self, size: int, doff: int, frame_type: int) -> None:
        if size < 8:
            raise FrameError(f"frame size {size} is smaller than its header")
        if size > self._max_frame_size:
            raise FrameError(f"frame size {size} exceeds max-frame-size {self._max_frame_size}")
        if doff < 2 or 4 * doff > size:
            raise FrameError(f"invalid data offset {doff} for a {size}-byte frame")
        if frame_type not in _ALLOWED:
            raise FrameError(f"unknown frame type {frame_type:#x}")


def _read_frame(body: memoryview, frame_type: int, channel: int) -> Frame:
    if not body:
        return Frame(frame_type, channel, None)
    try:
        value, offset = decode(body)
        if not isinstance(value, Described):
            raise DecodeError(f"frame body starts with {value!r}, not a performative")
        performative = from_described(value)
    except DecodeError as exc:
        raise FrameError(f"undecodable frame body: {exc}", DECODE_ERROR) from exc
    if not isinstance(performative, _ALLOWED[frame_type]):
        raise FrameError(
            f"{type(performative).__name__} is not a performative of frame type {frame_type}",
            DECODE_ERROR,
        )
    return Frame(frame_type, channel, performative, bytes(body[offset:]))


def encode_frame(frame: Frame) -> bytes:
    """The wire form of ``frame`` (data offset 2, no extended header).

    Raises:
        TypeError, ValueError: the body or a field cannot be encoded, or a payload is
            given without a body.
    """
    buf = bytearray(8)
    if frame.body is not None:
        encode_performative_into(buf, frame.body)
        buf += frame.payload
    elif frame.payload:
        raise ValueError("an empty frame carries no payload")
    try:
        _HEADER.pack_into(buf, 0, len(buf), 2, frame.type, frame.channel)
    except struct.error as exc:
        raise ValueError(f"invalid frame header: {exc}") from exc
    return bytes(buf)


def encode_transfer_frames(
    channel: int, transfer: Transfer, payload: bytes, max_frame_size: int
) -> list[bytes]:
    """The frames of one delivery, split so that none exceeds ``max_frame_size``.

    Every frame repeats ``transfer``'s fields; all but the last have ``more`` set.

    Raises:
        ValueError: ``max_frame_size`` leaves no room for payload.
    """
    head = _performative_bytes(dataclasses.replace(transfer, more=False))
    room = max_frame_size - 8 - len(head)
    if len(payload) <= room:
        return [_frame_bytes(channel, head, payload)]
    if room <= 0:
        raise ValueError(f"max_frame_size {max_frame_size} leaves no room for payload")
    more = _performative_bytes(dataclasses.replace(transfer, more=True))
    view = memoryview(payload)
    size = len(view)
    return [
        _frame_bytes(channel, more if start + room < size else head, view[start : start + room])
        for start in range(0, size, room)
    ]


def _performative_bytes(body: Performative) -> bytes:
    buf = bytearray()
    encode_performative_into(buf, body)
    return bytes(buf)


def _frame_bytes(channel: int, head: bytes, payload: bytes | memoryview) -> bytes:
    header = _HEADER.pack(8 + len(head) + len(payload), 2, FRAME_AMQP, channel)
    return b"".join((header, head, payload))
