"""The trace writer and reader: round trips, bad files, cut-off files."""

from __future__ import annotations

import gc
import gzip
import json
import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tracediff.errors import TraceFormatError, UserError
from tracediff.trace.compression import ZSTD_MAGIC
from tracediff.trace.reader import Trace, iter_records, read_footer, read_trace
from tracediff.trace.schema import SCHEMA_VERSION
from tracediff.trace.writer import TraceWriter
from tracediff.trace.zstd_file import ZstdTraceFile, read_last_frame

HEADER = {"tracediff": "test", "torch": "2.x", "device": "cpu", "backend": "eager", "command": ["t.py"], "seed": 0}


def _op(i: int, **extra: Any) -> dict[str, Any]:
    tensor = {"a": "self", "id": i, "v": 0, "dt": "float32", "sh": [2, 3], "dev": "cpu",
              "fp": {"sum": 1.5 * i, "l1": 2.0, "l2": 1.0, "max": 0.5, "nan": 0, "inf": 0, "n": 6}}
    return {"t": "op", "i": i, "op": "aten::cos", "d": 1, "m": "Net.l", "src": "t.py:3", "in": [tensor],
            "out": [dict(tensor, id=i + 1000)], **extra}


def _write(path: Path, records: list[dict[str, Any]], footer: dict[str, Any] | None = None) -> None:
    writer = TraceWriter(path, HEADER)
    for record in records:
        writer.write(record)
    writer.close(footer)


def _read(path: Path) -> tuple[Trace, list[dict[str, Any]]]:
    trace = Trace(path)
    return trace, list(trace)


def _expect_error(path: Path, *phrases: str) -> str:
    with pytest.raises(TraceFormatError) as info:
        _read(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.strip(), "empty message"
    for phrase in phrases:
        assert phrase in message, message
    return message


# -- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz", "run.jsonl.zst"])
def test_round_trip(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    records = [_op(i) for i in range(600)]  # past the writer's flush interval
    records.append({"t": "region", "i": 600, "ev": "enter", "name": "Net.forward", "r": 0, "call": 0, "in": []})
    _write(path, records, {"ops": 600, "error": None})

    trace, back = _read(path)
    assert back == records
    assert trace.header["t"] == "header"
    assert trace.header["schema"] == SCHEMA_VERSION
    assert {k: trace.header[k] for k in HEADER} == HEADER
    assert trace.footer is not None
    assert trace.footer["complete"] is True
    assert trace.footer["records"] == len(records)
    assert trace.footer["ops"] == 600
    assert not trace.truncated
    assert trace.truncated_at is None
    assert trace.failed is None


def test_gz_is_gzip_and_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "run.jsonl.gz", tmp_path / "b" / "run.jsonl.gz"  # writer makes parent dirs
    for path in (a, b):
        _write(path, [_op(i) for i in range(10)])
    assert a.read_bytes()[:2] == b"\x1f\x8b"
    assert a.read_bytes() == b.read_bytes()
    with gzip.open(a, "rt") as f:
        assert json.loads(f.readline())["t"] == "header"


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    gz = tmp_path / "run.jsonl.gz"
    _write(gz, [_op(0), _op(1)])
    renamed = tmp_path / "run.jsonl"
    renamed.write_bytes(gz.read_bytes())
    trace, back = _read(renamed)
    assert [r["i"] for r in back] == [0, 1]
    assert not trace.truncated


def test_non_finite_numbers_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    record = _op(0)
    record["out"][0]["fp"].update(sum=float("nan"), max=float("inf"), l1=float("-inf"))
    _write(path, [record])
    _, (back,) = _read(path)
    fp = back["out"][0]["fp"]
    assert math.isnan(fp["sum"]) and fp["max"] == math.inf and fp["l1"] == -math.inf


@pytest.mark.parametrize("key", ["sum", "l1", "l2", "max"])
def test_each_non_finite_statistic_round_trips_beside_other_nulls(tmp_path: Path, key: str) -> None:
    """A record often holds other nulls (a top-level op's module, an unread fingerprint, a key ending like a
    statistic's): only the statistic's null means a non-finite number, and that one must not be lost."""
    path = tmp_path / "run.jsonl"
    record = _op(0)
    record.update(m=None, zsum=None)
    record["in"] = [dict(record["out"][0], fp=None)]
    record["out"][0]["fp"][key] = float("inf")
    _write(path, [record, _op(1) | {"m": None, "zsum": None}])
    _, (back, plain) = _read(path)
    assert back["out"][0]["fp"][key] == math.inf and back["in"][0]["fp"] is None and back["m"] is None
    assert plain["zsum"] is None
    assert b"Infinity" in path.read_bytes().splitlines()[1] and b"Infinity" not in path.read_bytes().splitlines()[2]


def test_footer_error_is_failed(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    error = {"type": "ValueError", "message": "boom", "traceback": "..."}
    _write(path, [_op(0)], {"error": error})
    trace, _ = _read(path)
    assert trace.failed == error
    assert not trace.truncated


def test_helpers(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0), _op(1)])
    trace, records = read_trace(path)
    assert [r["i"] for r in records] == [0, 1]
    assert trace.footer is not None
    assert [r["i"] for r in iter_records(path)] == [0, 1]


def test_header_only_trace(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [])
    trace, records = _read(path)
    assert records == []
    assert trace.footer is not None and trace.footer["records"] == 0
    assert not trace.truncated


def test_state_before_and_after_reading(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0)])
    trace = Trace(path)
    assert trace.header["backend"] == "eager"  # header is read on open
    assert trace.footer is None and not trace.truncated  # not known before reading
    list(trace)
    assert trace.footer is not None
    with pytest.raises(RuntimeError):
        list(trace)


# -- bad input: one clear line, TraceFormatError (a UserError) --------------------------------


def test_missing_file(tmp_path: Path) -> None:
    _expect_error(tmp_path / "nope.jsonl", "no such file", "nope.jsonl")


def test_directory(tmp_path: Path) -> None:
    _expect_error(tmp_path, "directory")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    _expect_error(path, "empty")


def test_empty_gzip(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl.gz"
    path.write_bytes(gzip.compress(b""))
    _expect_error(path, "empty")


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 10,
        b"\xff\xfe\x00\x01" * 100,
        b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 4,
    ],
    ids=["all-bytes", "utf16-bom", "png"],
)
def test_binary_garbage(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_bytes(data)
    _expect_error(path, "not a trace")


@pytest.mark.parametrize("text", ["hello world\nsecond line\n", "a,b,c\n1,2,3\n", "{not json\n"])
def test_non_json_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "text.jsonl"
    path.write_text(text)
    _expect_error(path, "not JSON")


@pytest.mark.parametrize(
    "first_line",
    [
        {"t": "op", "i": 0, "op": "aten::cos"},
        {"hello": "world"},
        [1, 2, 3],
        "just a string",
        42,
        None,
    ],
    ids=["record", "other-object", "list", "string", "number", "null"],
)
def test_first_line_not_header(tmp_path: Path, first_line: Any) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(first_line) + "\n" + json.dumps(_op(0)) + "\n")
    _expect_error(path, "not a tracediff trace", "header")


@pytest.mark.parametrize("schema", [0, 1, 99, "2", None])
def test_wrong_schema_version(tmp_path: Path, schema: Any) -> None:
    path = tmp_path / "run.jsonl"
    header = {"t": "header", **HEADER}
    if schema is not None:
        header["schema"] = schema
    path.write_text(json.dumps(header) + "\n")
    message = _expect_error(path, "schema version", repr(schema), str(SCHEMA_VERSION))
    assert "re-record" in message


def test_schema_1_trace_is_refused_in_one_line(tmp_path: Path) -> None:
    """Schema 2 changed how fingerprints are accumulated: a schema-1 file must not be compared silently."""
    assert SCHEMA_VERSION == 2
    path = tmp_path / "old.jsonl"
    header = {"t": "header", **HEADER, "schema": 1}
    path.write_text(json.dumps(header) + "\n" + json.dumps(_op(0)) + "\n")
    message = _expect_error(path, "schema version 1", "re-record")
    assert "\n" not in message


def test_damaged_middle_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0), _op(1), _op(2)])
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"  # record 1, cut but followed by more lines
    path.write_text("".join(lines))
    trace = Trace(path)
    it = iter(trace)
    assert next(it)["i"] == 0  # what comes before the damage reads fine
    with pytest.raises(TraceFormatError) as info:
        next(it)
    assert "line 3" in str(info.value) and "damaged" in str(info.value)
    assert "\n" not in str(info.value)


def test_damaged_middle_of_gzip_text(tmp_path: Path) -> None:
    plain = tmp_path / "run.jsonl"
    _write(plain, [_op(0), _op(1), _op(2)])
    text = plain.read_text().replace('"i":1,', '"i":1,,,', 1)
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    _expect_error(gz, "line 3", "damaged")


@pytest.mark.parametrize("line", ['{"t": "bogus"}', '[1, 2]', '{"i": 3}'], ids=["unknown-type", "list", "no-type"])
def test_middle_line_not_a_record(tmp_path: Path, line: str) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0), _op(1)])
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(2, line + "\n")
    path.write_text("".join(lines))
    _expect_error(path, "line 3", "not a trace record")


def test_errors_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        Trace(tmp_path / "missing.jsonl")


# -- cut-off files: read what is there, report truncated ---------------------------------


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz", "run.jsonl.zst"])
def test_abandoned_writer(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    writer = TraceWriter(path, HEADER)
    for i in range(5):
        writer.write(_op(i))
    writer.abandon()
    writer.abandon()  # idempotent
    trace, records = _read(path)
    assert [r["i"] for r in records] == list(range(5))
    assert trace.truncated
    assert trace.footer is None
    assert trace.truncated_at is None
    assert trace.failed is None


def test_abandon_after_close_keeps_footer(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = TraceWriter(path, HEADER)
    writer.write(_op(0))
    writer.close()
    writer.abandon()
    writer.close()  # no second footer
    trace, records = _read(path)
    assert len(records) == 1 and not trace.truncated
    assert path.read_text().count('"footer"') == 1


def test_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0), _op(1), _op(2)])
    lines = path.read_text().splitlines(keepends=True)
    # header, records 0 and 1, then record 2 cut mid-line and no footer: a killed writer
    path.write_text("".join(lines[:3]) + lines[3][:40])
    trace, records = _read(path)
    assert [r["i"] for r in records] == [0, 1]
    assert trace.truncated
    assert trace.truncated_at == 4


def test_missing_footer_complete_last_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(0), _op(1)])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # drop the footer only
    trace, records = _read(path)
    assert len(records) == 2
    assert trace.truncated and trace.truncated_at is None


def test_gzip_cut_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.gz"
    records = [_op(i) for i in range(2000)]
    _write(path, records)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    trace, back = _read(cut)
    assert trace.truncated
    assert 0 < len(back) < len(records)
    assert back == records[: len(back)]  # a prefix, nothing invented


@pytest.mark.parametrize("keep", [3, 12])
def test_gzip_cut_before_the_header(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "run.jsonl.gz"
    _write(path, [_op(0)])
    path.write_bytes(path.read_bytes()[:keep])
    _expect_error(path)


def _read_flushed(path: Path, records: int) -> tuple[Trace, list[dict[str, Any]]]:
    """The file read once it holds `records` records: a .zst's writer thread writes a flushed batch a moment
    after the flush (at once for the other kinds)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            trace, back = _read(path)
        except TraceFormatError:  # not even the header written yet
            trace, back = None, []
        if (trace is not None and len(back) >= records) or time.monotonic() > deadline:
            assert trace is not None
            return trace, back
        time.sleep(0.01)


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz", "run.jsonl.zst"])
def test_flushed_records_readable_while_writer_is_open(tmp_path: Path, name: str) -> None:
    """What a killed process leaves behind: everything up to the last periodic flush."""
    path = tmp_path / name
    writer = TraceWriter(path, HEADER)
    try:
        for i in range(300):
            writer.write(_op(i))
        trace, records = _read_flushed(path, 256)
        assert trace.truncated
        assert 256 <= len(records) <= 300
        assert records == [_op(i) for i in range(len(records))]
    finally:
        writer.abandon()


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz", "run.jsonl.zst"])
def test_footer_read_without_the_records_matches_a_full_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    _write(path, [_op(i) for i in range(50)], {"ops": 50, "local_modules": [{"name": "m", "file": "m.py"}]})
    trace, _ = _read(path)
    assert read_footer(path) == trace.footer
    assert read_footer(path)["local_modules"] == [{"name": "m", "file": "m.py"}]


def test_footer_of_a_cut_off_trace_is_none(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _write(path, [_op(i) for i in range(50)])
    data = path.read_bytes()
    for cut in (data[: len(data) // 2], data[:-20]):  # mid-records; mid-footer
        path.write_bytes(cut)
        assert read_footer(path) is None


# -- zstd: `.jsonl.zst` -------------------------------------------------------------------------


def test_zst_is_zstd_with_the_footer_in_a_frame_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.zst"
    _write(path, [_op(i) for i in range(600)], {"ops": 600})
    assert path.read_bytes()[:4] == ZSTD_MAGIC
    footer = read_last_frame(path)
    assert footer is not None and json.loads(footer) == dict(json.loads(footer), t="footer", ops=600, records=600)


@pytest.mark.skipif(not Path("/usr/bin/zstd").exists() and shutil.which("zstd") is None, reason="no zstd binary")
def test_zst_reads_with_the_zstd_tool_as_the_plain_trace(tmp_path: Path) -> None:
    """`zstd -dc` (what zstdcat runs) gives the plain trace's very lines: the footer's frame is one more
    frame, the index a skippable frame that every decoder passes over."""
    plain, zst = tmp_path / "run.jsonl", tmp_path / "run.jsonl.zst"
    records = [_op(i) for i in range(1000)]
    _write(plain, records, {"ops": 1000})
    _write(zst, records, {"ops": 1000})
    tool = "/usr/bin/zstd" if Path("/usr/bin/zstd").exists() else str(shutil.which("zstd"))
    decoded = subprocess.run([tool, "-dc", str(zst)], capture_output=True, check=True).stdout
    assert decoded == plain.read_bytes()
    assert len(zst.read_bytes()) * 5 < len(decoded)


def test_zstd_detected_by_content_not_name(tmp_path: Path) -> None:
    zst = tmp_path / "run.jsonl.zst"
    _write(zst, [_op(0), _op(1)])
    renamed = tmp_path / "run.jsonl"
    renamed.write_bytes(zst.read_bytes())
    trace, back = _read(renamed)
    assert [r["i"] for r in back] == [0, 1]
    assert not trace.truncated
    assert read_footer(renamed) == trace.footer


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.9])
def test_zstd_cut_in_the_middle(tmp_path: Path, fraction: float) -> None:
    """A run killed mid-way leaves a stream that stops anywhere: what decodes stands, the trace is truncated."""
    path = tmp_path / "run.jsonl.zst"
    records = [_op(i) for i in range(3000)]
    _write(path, records)
    data = path.read_bytes()
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(data[: int(len(data) * fraction)])
    trace, back = _read(cut)
    assert trace.truncated and trace.footer is None
    assert 0 < len(back) < len(records)
    assert back == records[: len(back)]  # a prefix, nothing invented
    assert read_footer(cut) is None


@pytest.mark.parametrize("keep", [4, 12])
def test_zstd_cut_before_the_header(tmp_path: Path, keep: int) -> None:
    path = tmp_path / "run.jsonl.zst"
    _write(path, [_op(0)])
    path.write_bytes(path.read_bytes()[:keep])
    _expect_error(path, "empty")


def test_zstd_without_its_footer_frame_is_truncated(tmp_path: Path) -> None:
    """Cut exactly where the records' frame ends: a complete zstd file, no footer."""
    path = tmp_path / "run.jsonl.zst"
    _write(path, [_op(i) for i in range(10)])
    last = read_last_frame(path)
    assert last is not None
    data = path.read_bytes()
    offset = int.from_bytes(data[-16:-8], "little")  # the index: the footer frame's offset, then a tag
    path.write_bytes(data[:offset])
    trace, back = _read(path)
    assert len(back) == 10 and trace.truncated and read_footer(path) is None


def test_zstd_footer_without_the_index_is_read_through(tmp_path: Path) -> None:
    """A .zst made by another tool (`zstd run.jsonl`) has no index: the footer is found by reading it all."""
    plain = tmp_path / "run.jsonl"
    _write(plain, [_op(i) for i in range(50)], {"ops": 50})
    other = tmp_path / "other.jsonl.zst"
    other.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert read_last_frame(other) is None
    assert read_footer(other) == read_footer(plain)
    assert read_footer(other) is not None and read_footer(other)["ops"] == 50


def test_zstd_writer_in_a_forked_child_leaves_the_parent_trace_intact(tmp_path: Path) -> None:
    """The compressor's worker thread stays in the parent: a child that flushed or closed it (even at its
    exit, freeing it) would wait for that thread forever. Silenced, it writes nothing and exits at once."""
    path = tmp_path / "run.jsonl.zst"
    writer = TraceWriter(path, HEADER)
    for i in range(300):
        writer.write(_op(i))
    pid = os.fork()
    if pid == 0:  # the child: what a forked DataLoader worker or an os.fork()-ed script might do
        try:
            writer.silence_in_child()
            writer.write(_op(999))
            writer.flush()
            writer.close({"ops": 999})
            del writer
            gc.collect()
        finally:
            os._exit(0)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the forked child hung"
    for i in range(300, 600):
        writer.write(_op(i))
    writer.close({"ops": 600})
    trace, back = _read(path)
    assert back == [_op(i) for i in range(600)] and trace.footer is not None and trace.footer["ops"] == 600


def test_zstd_write_error_is_raised_on_the_recording_thread_and_the_file_is_closed(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """A failure of the writer thread (a full disk) reaches the writer's caller at its next flush or close,
    as a plain file's write error would, and leaves no thread waiting and no file open."""
    path = tmp_path / "run.jsonl.zst"
    writer = TraceWriter(path, HEADER)
    zst = writer._file
    assert isinstance(zst, ZstdTraceFile)

    def full_disk(data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zst, "_stream", type("Full", (), {"write": staticmethod(full_disk)})())
    for i in range(300):
        writer.write(_op(i))  # the flush at 256 hands a batch to the writer thread, which fails on it
    deadline = time.monotonic() + 10
    while zst._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space left"):  # at the next flush, and the lines since are dropped
        for i in range(300, 600):
            writer.write(_op(i))
    assert zst._batch == []
    with pytest.raises(OSError, match="No space left"):
        writer.close({"ops": 600})
    assert zst.closed and not zst._writer.is_alive()
