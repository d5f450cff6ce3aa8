"""Streaming JSONL writer: nothing accumulates per record in Python."""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from tracediff.trace.compression import Compression, compression_for_name
from tracediff.trace.digest_index import index_path, write_digest_index
from tracediff.trace.schema import FOOTER, HEADER, SCHEMA_VERSION
from tracediff.trace.zstd_file import ZstdTraceFile

# Flushing every record would dominate recording time; flushing never would
# lose the tail of a run killed by a signal. Every few hundred records is both.
_FLUSH_EVERY = 256


# From this many records a closed trace is indexed (trace/digest_index.py): about as many as make the 64 MiB from
# which a diff looks for stretches alike (engine.py's SHORTCUT_BYTES), at about a kilobyte a record.
INDEX_FROM_RECORDS = 50_000
# From this many records indexing takes ten seconds or more: it is said.
_SAY_INDEXING_FROM = 1_000_000

# Bytes buffered before a write to the file: the default (8 KiB, about ten records) made a system call
# every few records, about 5 us per record averaged over them.
_BUFFER_BYTES = 1 << 20


def _open_for_write(path: Path) -> IO[bytes] | ZstdTraceFile:
    compression = compression_for_name(path)
    if compression is Compression.GZIP:
        # mtime=0 keeps the file byte-identical across identical runs. GzipFile opens
        # (and so closes) the file itself: a file passed as fileobj= is left open.
        return gzip.GzipFile(path, mode="wb", mtime=0)  # type: ignore[return-value]
    if compression is Compression.ZSTD:
        return ZstdTraceFile(path)
    return open(path, "wb", buffering=_BUFFER_BYTES)


# How orjson writes a fingerprint statistic that overflowed float64 (the only non-finite
# floats in a record): json writes those as Infinity/NaN, which the reader parses. The keys'
# ends, as the bytes before `":null` (`,"l1` ends with `"l1`).
_STATISTIC_KEYS = (b'"sum', b'"l1', b'"l2', b'"max')


def _has_null_statistic(line: bytes) -> bool:
    """Whether `line` holds a statistic written as null. By each `":null` and the key before it: most records have
    one (a top-level op's module, an unread fingerprint), and a regular expression for the four keys took 2 us a
    record to scan a line."""
    at = line.find(b'":null')
    while at != -1:
        if line[max(0, at - 4):at].endswith(_STATISTIC_KEYS):
            return True
        at = line.find(b'":null', at + 6)
    return False


class TraceWriter:
    """Writes a header, then records as they come, then a footer on close; a long trace's digest index beside it
    once closed (trace/digest_index.py), which lets a diff of two long traces skip what both hold alike."""

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _open_for_write(self.path)
        self._unflushed = 0
        self.records = 0
        self._silenced = False  # a forked child's copy: it writes nothing, and indexes nothing
        self._json = json.JSONEncoder(separators=(",", ":"), allow_nan=True).encode
        self._write_line({"t": HEADER, "schema": SCHEMA_VERSION, **header})
        self._file.flush()
        index_path(self.path).unlink(missing_ok=True)  # an earlier trace's

    def _encode(self, obj: dict[str, Any]) -> bytes:
        # orjson is ~10x faster than json, but writes NaN/Infinity as null: a line
        # with a null may hold an overflowed statistic, which json writes as Infinity.
        try:
            line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError:  # e.g. an integer past 64 bits in the header
            line = b"null"
        if line == b"null" or _has_null_statistic(line):
            line = (self._json(obj) + "\n").encode("utf-8")
        return line

    def _write_line(self, obj: dict[str, Any]) -> None:
        self._file.write(self._encode(obj))

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(self._encode(record))
        self.records += 1
        self._unflushed += 1
        if self._unflushed >= _FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        self._file.flush()
        self._unflushed = 0

    def close(self, footer: Mapping[str, Any] | None = None) -> None:
        """Write the footer (marks the file complete) and close."""
        if self._file.closed:
            return
        line = self._encode({"t": FOOTER, "complete": True, "records": self.records, **(footer or {})})
        if isinstance(self._file, ZstdTraceFile):  # the footer in a frame of its own, found from the file's end
            self._file.close_with_last_line(line)
        else:
            self._file.write(line)
            self._file.close()
        if self.records >= INDEX_FROM_RECORDS and not self._silenced:
            self._index()

    def _index(self) -> None:
        """The closed trace's digest index. An accelerator of later diffs: a trace without one still diffs, so a
        failure to write it (a full disk) is said, not raised."""
        if self.records >= _SAY_INDEXING_FROM:
            print(f"tracediff: indexing {self.path} ({self.records:,} records) for long diffs", file=sys.stderr,
                  flush=True)
        try:
            write_digest_index(self.path)
        except OSError as e:
            print(f"tracediff: {self.path}: no digest index written ({e}); a diff reads the whole trace",
                  file=sys.stderr, flush=True)

    def silence_in_child(self) -> None:
        """After a fork, in the child: send whatever this process writes to the file to /dev/null.

        The child inherits the open file (its offset is shared with the parent)
        and the writer's unflushed bytes: a flush or close at the child's exit,
        or a gzip trailer, would land in the parent's trace. Pointing the
        child's copy of the descriptor at /dev/null leaves the parent's intact.
        A zstd compressor is left alone for good (its worker threads stayed in
        the parent: `ZstdTraceFile.orphan_in_child`).
        """
        self._silenced = True
        if isinstance(self._file, ZstdTraceFile):
            self._file.orphan_in_child()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._file.fileno())
        finally:
            os.close(null)

    def abandon(self) -> None:
        """Close without a footer: the file reads back as truncated."""
        if not self._file.closed:
            self._file.close()
