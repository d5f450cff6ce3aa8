"""A minimal PNG reader (stdlib zlib + struct) for checking browser screenshots.

Handles what Chromium writes: 8-bit RGB or RGBA, not interlaced, any of
the five scanline filters. Returns rows of (r, g, b) tuples.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

_CHANNELS = {2: 3, 6: 4}  # colour type -> bytes per pixel (8-bit)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    """Undo one scanline's filter in place (one loop per filter type: this runs per byte)."""
    n = len(line)
    if kind == 1:
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:
        line[:] = bytes((x + u) & 0xFF for x, u in zip(line, prev))
    elif kind == 3:
        for i in range(n):
            line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 0xFF
    elif kind == 4:
        for i in range(n):
            if i >= bpp:
                line[i] = (line[i] + _paeth(line[i - bpp], prev[i], prev[i - bpp])) & 0xFF
            else:
                line[i] = (line[i] + prev[i]) & 0xFF


def read_png(path: Path) -> list[list[tuple[int, int, int]]]:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in _CHANNELS and interlace == 0, (depth, colour, interlace)
            bpp = _CHANNELS[colour]
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        _unfilter(kind, line, prev, bpp)
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return rows  # type: ignore[return-value]
