"""Which compression a trace's name asks for, which one a file holds, and opening it for reading.

A trace is written compressed when its name says so (`.jsonl.gz`, `.jsonl.zst`) and read by its
first bytes, whatever its name: a renamed file still reads. Python before 3.14 has no zstd in its
standard library: zstd comes from the `zstandard` package.
"""

from __future__ import annotations

import enum
import gzip
import io
import zlib
from pathlib import Path
from typing import IO, Any

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# What a stream cut off mid-way raises once its readable part is read: what came before stands.
CUT_OFF_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError)


class Compression(enum.Enum):
    NONE = ""
    GZIP = ".gz"
    ZSTD = ".zst"


def compression_for_name(path: str | Path) -> Compression:
    """The compression a file name asks for: by its last suffix."""
    suffix = Path(path).suffix
    for kind in (Compression.GZIP, Compression.ZSTD):
        if suffix == kind.value:
            return kind
    return Compression.NONE


def compression_of_file(path: str | Path) -> Compression:
    """The compression a file holds, by its first bytes."""
    with open(path, "rb") as probe:
        magic = probe.read(len(ZSTD_MAGIC))
    if magic.startswith(GZIP_MAGIC):
        return Compression.GZIP
    if magic == ZSTD_MAGIC:
        return Compression.ZSTD
    return Compression.NONE


# Plain bytes per compressed byte, about, in the traces measured (BENCHMARKS.md, "Compressed traces": 6.7x to 8x
# for zstd -1 and gzip -9): enough to tell a large trace from a small one by its file's size.
_TYPICAL_RATIO = 7


def estimated_text_bytes(path: str | Path) -> int:
    """About how many bytes of JSON lines a trace file holds: its size, times the typical ratio if compressed."""
    size = Path(path).stat().st_size
    return size if compression_of_file(path) is Compression.NONE else size * _TYPICAL_RATIO


def open_text(path: Path) -> IO[str]:
    """The file's lines as text, decompressed as its first bytes say."""
    return io.TextIOWrapper(open_bytes(path), encoding="utf-8", errors="strict")


def open_bytes(path: Path) -> IO[bytes]:
    """The file's JSON lines as bytes, decompressed as its first bytes say (a plain file can seek)."""
    kind = compression_of_file(path)
    if kind is Compression.GZIP:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind is Compression.ZSTD:
        return io.BufferedReader(_ZstdReader(path), _READ_BYTES)
    return open(path, "rb")


# Compressed bytes read at once: about 1 MB once decompressed.
_READ_BYTES = 1 << 17


class _ZstdReader(io.RawIOBase):
    """A zstd file's decompressed bytes, across its frames (the footer is a frame of its own, the index a
    skippable frame: trace/zstd_file.py). Decompressed with `decompressobj`, which hands out everything the
    input read so far decodes to: zstandard's `stream_reader` stops short at the end of a cut-off file (a
    killed run's trace), with decoded lines still held back."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._file = open(path, "rb")
        self._decompressor = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._file.read(_READ_BYTES)
            if not chunk:
                return 0  # the end, or where the file was cut off
            self._pending = memoryview(self._decompressor.decompress(chunk))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def close(self) -> None:
        self._file.close()
        super().close()
