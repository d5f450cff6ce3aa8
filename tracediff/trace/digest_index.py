"""A long trace's digest index: `t.jsonl.idx` beside `t.jsonl`, one entry per line after the header.

An entry is three 64-bit integers:

    digest   crc32 and adler32 of the record's line with the numbers that name rather than measure left out
             (the record's sequence number `i`, its tensors' ids `id` and their views' base ids `b`: an op
             added early in one run shifts them for every record after it). Two records with one digest are
             the same op at the same place, on arguments and with results of the same dtypes, shapes and
             fingerprints.
    place    crc32 of the same line up to its arguments (`"in":`): the op, module and source line.
    end      where the line ends in the trace's text (decompressed), with the record's facts in the top byte.

A diff of two long traces finds the stretches both hold alike by their digests without parsing them, and reads
only the rest (diff/shortcut.py). TraceWriter indexes a trace of `INDEX_FROM_RECORDS` records or more once it is
closed, reading it back: a few microseconds a record, after the recorded program ended, and nothing for the short
traces a diff reads whole anyway (writing the entries as the records went cost a recorded call 7-8% more).
The index is an accelerator: a trace without one, or with one that does not match it (`read_digest_index` checks
the header line, the footer's record count and the end), is diffed the long way.
"""

from __future__ import annotations

import re
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path

from tracediff.op_names import NO_VALUE_OPS, base_op
from tracediff.outputs import INDEX_SUFFIX
from tracediff.trace.compression import Compression, compression_of_file, open_bytes

_MAGIC = b"TDIDX\x01\x00\x00"
_HEAD = struct.Struct("<8sqq")  # magic, the header line's length and crc32
ENTRY_WORDS = 3

# Facts of a record, in the top byte of its entry's end.
KEEP = 1  # not an op or kernel, or a NaN or Inf in a fingerprint: a diff reads it whatever its digest
NO_VALUE = 2  # an op that moves no values (skeleton.alignable is False)
IS_OP = 4  # an op record (not a kernel)
FOOTER = 8  # the footer line
NONFINITE = 16  # a NaN or Inf in a fingerprint (with KEEP)
CHECK = 32  # a compiled call judged on its inputs (with KEEP)
_FACTS_SHIFT = 56

# Keys whose numbers name a record or tensor. In a JSON line a quote inside a string is escaped: these match keys.
_NAMING_NUMBERS = re.compile(rb'"(?:i|id|b)":\d+')


def index_path(trace: str | Path) -> Path:
    trace = Path(trace)
    return trace.with_name(trace.name + INDEX_SUFFIX)


def without_naming_numbers(line: bytes) -> bytes:
    """`line` without its `i`, `id` and `b` keys and their numbers. One regular expression's split: a scan of the
    line, about a nanosecond a byte here, which the whole entry costs a few of."""
    return b"".join(_NAMING_NUMBERS.split(line))


def line_entry(line: bytes, end: int) -> tuple[int, int, int]:
    """The index entry of one line of a trace (ending at `end` in its text)."""
    named = without_naming_numbers(line)
    digest = zlib.crc32(named) | zlib.adler32(named) << 32
    cut = named.find(b',"in":')
    place = zlib.crc32(named[:cut] if cut >= 0 else named)
    return _signed(digest), place, end | line_facts(line) << _FACTS_SHIFT


_KINDS = {b"op": IS_OP, b"kernel": 0, b"footer": KEEP | FOOTER, b"check": KEEP | CHECK}
_KIND = re.compile(rb'\{"t":"(\w+)"')
_OP_NAME = re.compile(rb'"op":"([^"]*)"')
# A fingerprint writes its NaN and Inf counts as `"nan":N,"inf":N,`: a line has as many of the first as of these
# with none (a fingerprint written otherwise counts as holding a NaN: its record is read, never left out).
_NAN_COUNT = b'"nan":'
_FINITE_COUNTS = b'"nan":0,"inf":0,'


def line_facts(line: bytes) -> int:
    """A line's facts, read off its text: its kind, an op that moves no values, a NaN or Inf."""
    kind = _KIND.match(line)
    facts = _KINDS.get(kind.group(1), KEEP) if kind else KEEP
    if facts & IS_OP:
        name = _OP_NAME.search(line, 0, 200)
        if name and base_op(name.group(1).decode()) in NO_VALUE_OPS:
            facts |= NO_VALUE
    if line.count(_NAN_COUNT) != line.count(_FINITE_COUNTS):
        facts |= KEEP | NONFINITE
    return facts


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# Bytes read at once while indexing; a record is about a kilobyte.
_READ_BYTES = 1 << 24


def write_digest_index(trace: Path) -> None:
    """Index a complete trace: its lines read back, the index written beside it (whole, or not at all)."""
    target = index_path(trace)
    partial = target.with_name(target.name + ".partial")
    try:
        _write_entries(trace, partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)


def _write_entries(trace: Path, partial: Path) -> None:
    with open_bytes(trace) as src, open(partial, "wb") as out:
        header = src.readline()
        out.write(_HEAD.pack(_MAGIC, len(header), zlib.crc32(header)))
        end, rest = len(header), b""
        while True:
            chunk = src.read(_READ_BYTES)
            data = rest + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            lines, rest = data[:cut].splitlines(keepends=True), data[cut:]
            entries = array("q")
            for line in lines:
                end += len(line)
                entries.extend(line_entry(line, end))
            if sys.byteorder == "big":  # the file's words are little-endian
                entries.byteswap()
            entries.tofile(out)
            if not chunk:
                break


@dataclass
class DigestIndex:
    """A trace's index, read back: one entry per line after the header (the footer's last)."""

    digests: array  # the digest of each line
    places: array | None  # the place of each line, if asked for
    ends: array  # where each line ends, facts cleared
    facts: bytes  # each line's facts
    header_bytes: int  # where the first line after the header starts

    def __len__(self) -> int:
        return len(self.digests)

    def start(self, line: int) -> int:
        return self.ends[line - 1] if line else self.header_bytes


# Entries read at once: the columns are taken apart a block at a time, so reading never holds the file twice.
_BLOCK_ENTRIES = 1 << 20


def read_digest_index(trace: str | Path, footer_records: int | None, places: bool = False) -> DigestIndex | None:
    """The index of a complete trace (its footer counts `footer_records` records); None where there is none,
    or it does not match the trace (another run's, cut off, the trace rewritten since)."""
    path = index_path(trace)
    try:
        with open(path, "rb") as f:
            magic, header_bytes, header_crc = _HEAD.unpack(f.read(_HEAD.size))
            if magic != _MAGIC or footer_records is None or \
                    path.stat().st_size != _HEAD.size + 8 * ENTRY_WORDS * (footer_records + 1):
                return None
            index = DigestIndex(array("q"), array("q") if places else None, array("q"), b"", header_bytes)
            raw_ends = bytearray()
            for _ in range(0, footer_records + 1, _BLOCK_ENTRIES):
                block = array("q")
                try:
                    block.fromfile(f, ENTRY_WORDS * _BLOCK_ENTRIES)
                except EOFError:  # the last block: what there was is read
                    pass
                if sys.byteorder == "big":
                    block.byteswap()
                index.digests.extend(block[0::ENTRY_WORDS])
                if index.places is not None:
                    index.places.extend(block[1::ENTRY_WORDS])
                raw_ends += block[2::ENTRY_WORDS].tobytes()
    except (OSError, struct.error, ValueError):
        return None
    with open_bytes(Path(trace)) as t:
        header = t.readline()
    if len(header) != header_bytes or zlib.crc32(header) != header_crc:
        return None
    # Little-endian words: a fact byte is each end's eighth byte.
    top = slice(_FACTS_SHIFT // 8, None, 8)
    index.facts = bytes(raw_ends[top])
    raw_ends[top] = bytes(len(index.facts))
    index.ends.frombytes(raw_ends)
    if not index.facts[-1] & FOOTER:
        return None
    if compression_of_file(trace) is Compression.NONE and index.ends[-1] != Path(trace).stat().st_size:
        return None
    return index
