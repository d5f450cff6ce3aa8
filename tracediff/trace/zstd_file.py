"""A zstd-compressed trace file (`.jsonl.zst`): how it is written, and its footer read from its end.

The layout, readable by any zstd decoder (`zstd -dc t.jsonl.zst` gives the plain trace's lines):

    frame 1     the header and the records; every flush ends a block, so a file cut off after it
                decodes up to there (a run killed by a signal leaves a readable trace)
    frame 2     the footer line alone
    index       a skippable frame (which decoders pass over) holding frame 2's offset

The index makes the footer as cheap to read as a plain file's last line: `read_last_frame` reads
frame 2 alone. A file without the index (cut off, abandoned) is read through instead.

Compressing is done off the recording thread, by a writer thread of this file's own: the recording
thread only collects lines and hands a batch over at each flush. zstd's own worker threads
(`ZstdCompressor(threads=1)`) would not do: a flush waits until they have compressed everything
written, so with a flush every few hundred records the recording thread waited for each batch's
compression, and longer than compressing it itself (BENCHMARKS.md, "Compressed traces").
"""

from __future__ import annotations

import os
import queue
import struct
import threading
from pathlib import Path

import zstandard

# Level 1 against 3, measured on recorded traces (BENCHMARKS.md, "Compressed traces"): 3 makes the
# file a few percent smaller for about 1.5x the compressing time.
LEVEL = 1

# A skippable frame's magic is one of 0x184D2A50..0x184D2A5F; its payload: the footer frame's offset, a tag.
_INDEX_MAGIC = 0x184D2A5D
_INDEX_TAG = b"tdfooter"
_INDEX = struct.Struct("<II Q 8s")
_INDEX_PAYLOAD = _INDEX.size - 8  # the frame's size field counts what follows its 8-byte frame header

# Bytes handed to the file at once: the stream writes a compressed block per flush, a few tens of KB.
_BUFFER_BYTES = 1 << 20

# Batches waiting for the writer thread before a flush waits for it (a few hundred records each): memory
# stays bounded where the writer cannot keep up.
_QUEUED_BATCHES = 64

# A footer is a few KB (its traceback is capped at 8000 characters): a longer last frame is not one.
_LAST_FRAME_BYTES = 1 << 20


class ZstdTraceFile:
    """A binary file that compresses what is written to it into a trace's zstd layout, on a thread of its own."""

    def __init__(self, path: Path, level: int | None = None) -> None:
        self._level = LEVEL if level is None else level
        self._raw = open(path, "wb", buffering=_BUFFER_BYTES)
        compressor = zstandard.ZstdCompressor(level=self._level)
        self._stream = compressor.stream_writer(self._raw, closefd=False, write_return_read=True)
        self._batch: list[bytes] = []
        self._batches: queue.Queue[bytes | None] = queue.Queue(_QUEUED_BATCHES)
        self._error: BaseException | None = None
        self._orphaned = False  # in a forked child: nothing is written, and the writer thread is not there
        # A daemon: a process that never closes its recording still exits (the batches not yet written are lost,
        # as a plain file's unflushed buffer is).
        self._writer = threading.Thread(target=self._write_batches, name="tracediff-zstd-writer", daemon=True)
        self._writer.start()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def fileno(self) -> int:
        return self._raw.fileno()

    def write(self, data: bytes) -> int:
        self._batch.append(data)
        return len(data)

    def flush(self) -> None:
        """Hand the lines written since the last flush to the writer thread, which ends a block after them:
        what was written so far decodes from the file once it has (a batch or two behind at most)."""
        if self._orphaned or self._raw.closed:
            return
        self._raise_writer_error()
        self._hand_over()

    def _hand_over(self) -> None:
        if self._batch:
            self._batches.put(b"".join(self._batch))
            self._batch = []

    def _write_batches(self) -> None:
        """The writer thread: each batch compressed (zstandard lets go of the GIL meanwhile), then a block ended."""
        while (batch := self._batches.get()) is not None:
            if self._error is not None:
                continue  # drain, so that a waiting flush never blocks
            try:
                self._stream.write(batch)
                self._stream.flush(zstandard.FLUSH_BLOCK)
                self._raw.flush()
            except BaseException as e:  # e.g. a full disk: raised on the recording thread at its next flush
                self._error = e

    def _raise_writer_error(self) -> None:
        """The writer thread's failure, again at every flush (as a plain file's writes fail on a full disk):
        the thread writes nothing after it, so the stream is never written to in a broken state, and the lines
        collected since are dropped rather than kept."""
        if self._error is not None:
            self._batch = []
            raise self._error

    def _finish_records(self) -> bool:
        """Write every batch and end the records' frame; False where there is nothing to finish."""
        if self._orphaned or self._raw.closed:
            return False
        self._hand_over()
        self._batches.put(None)
        self._writer.join()
        try:
            self._raise_writer_error()
            self._stream.flush(zstandard.FLUSH_FRAME)
        except BaseException:
            self._raw.close()
            raise
        return True

    def close(self) -> None:
        """End the frame and close the file: a complete zstd file, with no index (its footer is read through)."""
        if self._finish_records():
            self._raw.close()

    def close_with_last_line(self, line: bytes) -> None:
        """End the records' frame, write `line` (the footer) as a frame of its own, then the index, and close."""
        if not self._finish_records():
            return
        with self._raw:
            offset = self._raw.tell()
            self._raw.write(zstandard.ZstdCompressor(level=self._level).compress(line))
            self._raw.write(_INDEX.pack(_INDEX_MAGIC, _INDEX_PAYLOAD, offset, _INDEX_TAG))

    def orphan_in_child(self) -> None:
        """After a fork, in the child: write nothing more, ever. The writer thread stayed in the parent, so a
        flush could wait for it forever; the parent's batches and the compressor's state are the parent's to
        write. The child's file descriptor is the caller's to silence."""
        self._orphaned = True
        self._batch = []


def read_last_frame(path: str | Path) -> bytes | None:
    """The last line as the writer closed it (`close_with_last_line`), from the file's end; None where the
    file has no index (cut off, abandoned, or written by another tool): read it through instead."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < _INDEX.size:
            return None
        f.seek(size - _INDEX.size)
        magic, payload, offset, tag = _INDEX.unpack(f.read(_INDEX.size))
        if magic != _INDEX_MAGIC or payload != _INDEX_PAYLOAD or tag != _INDEX_TAG:
            return None
        if not 0 < offset < size - _INDEX.size or size - _INDEX.size - offset > _LAST_FRAME_BYTES:
            return None
        f.seek(offset)
        frame = f.read(size - _INDEX.size - offset)
    try:
        return zstandard.ZstdDecompressor().decompress(frame)
    except zstandard.ZstdError:
        return None
