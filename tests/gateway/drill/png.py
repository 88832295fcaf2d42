"""Reading the pixels of a PNG (8-bit RGB or RGBA, as Chromium writes its screenshots)
with the standard library only, to check what a picture shows."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_png(path: Path) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """(width, height, rows of (r, g, b) pixels)."""
    data = path.read_bytes()
    assert data[:8] == SIGNATURE, "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[list[tuple[int, int, int]]] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append([(line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def _unfilter(kind: int, line: bytearray, prior: bytearray, bpp: int) -> None:
    # One loop per filter kind (a screenshot is millions of bytes; most rows are "none"
    # or "up").
    n = len(line)
    if kind == 0:
        return
    if kind == 2:
        line[:] = bytes((a + b) & 0xFF for a, b in zip(line, prior, strict=True))
    elif kind == 1:
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 3:
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + (left + prior[i]) // 2) & 0xFF
    elif kind == 4:
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            up = prior[i]
            corner = prior[i - bpp] if i >= bpp else 0
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + pred) & 0xFF


def tallest_column_of(rows: list[list[tuple[int, int, int]]], colour: str,
                      tolerance: int = 30) -> int:
    """How many pixels of ``colour`` (``#rrggbb``) the column with most of them has: a
    vertical line of that colour makes a tall one, text or a legend swatch a short one."""
    wr, wg, wb = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    counts = [0] * len(rows[0])
    for row in rows:
        for x, (r, g, b) in enumerate(row):
            if abs(r - wr) <= tolerance and abs(g - wg) <= tolerance and abs(b - wb) <= tolerance:
                counts[x] += 1
    return max(counts)
