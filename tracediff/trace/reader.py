"""Streaming JSONL reader that turns every kind of bad file into one clear line.

`Trace` validates the header as soon as it is opened, then yields records
lazily; once iteration ends it knows the footer and whether the file was cut
off (no footer, or a half-written last line).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import orjson

from tracediff.errors import TraceFormatError
from tracediff.trace.compression import CUT_OFF_ERRORS, Compression, compression_of_file, open_text
from tracediff.trace.schema import (
    CHECK,
    FOOTER,
    HEADER,
    RECORD_TYPES,
    SCHEMA_VERSION,
    CheckRecord,
    Footer,
    Header,
    ScriptError,
    TraceRecord,
)
from tracediff.trace.zstd_file import read_last_frame


def parse_line(text: str | bytes) -> Any:
    """One JSON line. orjson parses trace records about twice as fast as json
    (most of a diff's time is parsing); json takes the rare line orjson
    refuses, e.g. `Infinity` from a float64 statistic that overflowed."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, ended_with_newline); a cut-off gzip or zstd stream just ends."""
    try:
        with open_text(path) as f:
            for number, line in enumerate(f, start=1):
                yield number, line, line.endswith("\n")
    except CUT_OFF_ERRORS:
        return  # a compressed stream cut off mid-way: what came before stands
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not a trace file (binary data, not UTF-8 JSON lines: {e.reason})") from None


class Trace:
    """One trace file. Iterate it for records; `footer`/`truncated` are known afterwards."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise TraceFormatError(f"{self.path}: no such file")
        if self.path.is_dir():
            raise TraceFormatError(f"{self.path}: is a directory, expected a .jsonl trace file")
        if self.path.stat().st_size == 0:
            raise TraceFormatError(f"{self.path}: empty file, not a trace")
        self._lines = _lines(self.path)
        self.header: Header = self._read_header()
        self.footer: Footer | None = None
        self.truncated_at: int | None = None  # line number of a half-written line
        # Same-input checks (record/judging/), kept apart: they pair with nothing in the other trace.
        self.checks: list[CheckRecord] = []
        self._exhausted = False

    def _read_header(self) -> Header:
        first = next(self._lines, None)
        if first is None:
            raise TraceFormatError(f"{self.path}: empty file, not a trace")
        _, text, _ = first
        try:
            header = parse_line(text)
        except json.JSONDecodeError:
            raise TraceFormatError(f"{self.path}: not a trace file (line 1 is not JSON)") from None
        if not isinstance(header, dict) or header.get("t") != HEADER:
            raise TraceFormatError(f"{self.path}: not a tracediff trace (line 1 is not a trace header)")
        schema = header.get("schema")
        if schema != SCHEMA_VERSION:
            raise TraceFormatError(
                f"{self.path}: trace schema version {schema!r}, this tracediff reads version "
                f"{SCHEMA_VERSION}; re-record it with this version of tracediff"
            )
        return cast(Header, header)  # a JSON object that says it is one

    def __iter__(self) -> Iterator[TraceRecord]:
        if self._exhausted:
            raise RuntimeError("a Trace is read once; open it again to re-read")
        for number, text, complete_line in self._lines:
            try:
                record = parse_line(text)
            except json.JSONDecodeError:
                if not complete_line:
                    self.truncated_at = number  # the writer died mid-line
                    break
                raise TraceFormatError(f"{self.path}: line {number} is not JSON; the file is damaged") from None
            kind = record.get("t") if isinstance(record, dict) else None
            if kind == FOOTER:
                self.footer = record
                break
            if kind not in RECORD_TYPES:
                raise TraceFormatError(f"{self.path}: line {number} is not a trace record (type {kind!r})")
            if kind == CHECK:
                self.checks.append(record)
                continue
            yield record
        self._exhausted = True

    @property
    def truncated(self) -> bool:
        """True once read to the end without finding a footer."""
        return self._exhausted and self.footer is None

    @property
    def failed(self) -> ScriptError | None:
        """The recorded script's exception, if it raised."""
        return (self.footer or {}).get("error")


def read_trace(path: str | Path) -> tuple[Trace, list[TraceRecord]]:
    """Read a whole trace into memory: the `Trace` (header, footer) and its records."""
    trace = Trace(path)
    records = list(trace)
    return trace, records


def records_at(path: str | Path, indices: Iterable[int]) -> dict[int, TraceRecord]:
    """The records of a trace with these indices, read up to the last of them."""
    wanted = set(indices)
    found: dict[int, TraceRecord] = {}
    if not wanted:
        return found
    for record in Trace(path):
        if record.get("i") in wanted:
            found[record["i"]] = record
            if len(found) == len(wanted):
                break
    return found


def iter_records(path: str | Path) -> Iterator[TraceRecord]:
    """Records of a trace file, streamed."""
    yield from Trace(path)


_FOOTER_TAIL_BYTES = 1 << 20  # a footer is a few KB (its traceback is capped at 8000 characters)


def read_footer(path: str | Path) -> Footer | None:
    """The footer, without parsing the records: the last line of a plain file, the last frame of a zstd file
    (trace/zstd_file.py).

    A gzip file, or a zstd file without its index, has no cheap end, so it is read
    through. None when the trace has no footer (cut off).
    """
    trace = Trace(path)  # validates the header: a bad file fails the same way everywhere
    compression = compression_of_file(trace.path)
    last_frame = read_last_frame(trace.path) if compression is Compression.ZSTD else None
    if last_frame is not None:
        return _footer_of(last_frame.splitlines())
    if compression is not Compression.NONE:
        for _ in trace:
            pass
        return trace.footer
    with open(trace.path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - _FOOTER_TAIL_BYTES))
        tail = f.read().splitlines()
    return _footer_of(tail)


def _footer_of(tail: list[bytes]) -> Footer | None:
    """The footer, where the last non-empty line of `tail` is one."""
    for line in reversed(tail):
        if line.strip():
            try:
                record = parse_line(line.decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                return None  # half-written last line: cut off
            return cast(Footer, record) if isinstance(record, dict) and record.get("t") == FOOTER else None
    return None
