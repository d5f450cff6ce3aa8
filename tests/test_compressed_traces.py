"""Compressed traces end to end: every command reads a .jsonl.zst as it reads a plain trace; `--compress`
(or `compress: true`) makes a run directory's traces .jsonl.zst, and plain .jsonl stays the default."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import tracediff
from tests.conftest import FIXTURES, Result, child_command, invoke
from tracediff.config import Config
from tracediff.errors import TraceFormatError
from tracediff.outputs import rank_set
from tracediff.trace.compression import ZSTD_MAGIC
from tracediff.trace.reader import Trace, read_footer
from tracediff.trace.writer import TraceWriter
from tracediff.trace.zstd_file import read_last_frame

DEMO = "wrong_decomposition.py"
DEMO_BACKENDS = "eager,wrong_decomposition:wrong_cos_backend"

# What a report says that does not depend on where its traces are or how they are stored.
_UNSTORED = ("traces", "run_dir", "runs")


def _verdict(report: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in report.items() if key not in _UNSTORED}


def _lines(path: Path) -> list[dict[str, Any]]:
    """Header, records and footer, as the reader reads them (a trace without checks: all its lines)."""
    trace = Trace(path)
    return [dict(trace.header), *trace, dict(trace.footer or {})]


@pytest.fixture(scope="module")
def demo_runs(run_fixture: Any) -> dict[str, Result]:
    """The bundled demo run twice, as `tracediff run` writes it by default and with --compress."""
    return {"plain": run_fixture(DEMO, DEMO_BACKENDS), "compressed": run_fixture(DEMO, DEMO_BACKENDS, "--compress")}


def test_run_writes_plain_traces_by_default(demo_runs: dict[str, Result]) -> None:
    report = demo_runs["plain"].report
    assert [Path(t).name for t in report["traces"]] == ["a-eager.jsonl", "b-wrong_decomposition_wrong_cos_backend.jsonl"]
    assert all(Path(t).read_bytes()[:1] == b"{" for t in report["traces"])


def test_run_with_compress_writes_zstd_traces_and_reaches_the_same_verdict(demo_runs: dict[str, Result]) -> None:
    plain, compressed = demo_runs["plain"], demo_runs["compressed"]
    assert compressed.exit_code == plain.exit_code == 1, compressed.stderr
    report = compressed.report
    assert [Path(t).name for t in report["traces"]] == ["a-eager.jsonl.zst",
                                                        "b-wrong_decomposition_wrong_cos_backend.jsonl.zst"]
    assert all(Path(t).read_bytes()[:4] == ZSTD_MAGIC for t in report["traces"])
    assert _verdict(report) == _verdict(plain.report)
    for run in report["runs"]:  # each run's log beside its trace, named without the trace's suffixes
        assert Path(run["log"]).name in ("a-eager.log", "b-wrong_decomposition_wrong_cos_backend.log")
    for zst, jsonl in zip(report["traces"], plain.report["traces"]):
        lines, plain_lines = _lines(Path(zst)), _lines(Path(jsonl))
        assert len(lines) == len(plain_lines) and read_footer(zst) == lines[-1]
        assert read_last_frame(zst) is not None  # the footer is found from the file's end


def test_diff_show_and_nan_read_compressed_traces_as_plain_ones(demo_runs: dict[str, Result], tmp_path: Path) -> None:
    zst, plain = demo_runs["compressed"].report["traces"], demo_runs["plain"].report["traces"]
    diffed = invoke("diff", *zst, "--format", "json", "--html", str(tmp_path / "r.html"))
    assert diffed.exit_code == 1, diffed.stderr
    assert _verdict(diffed.report) == _verdict(invoke("diff", *plain, "--format", "json").report)
    assert "aten::cos" in (tmp_path / "r.html").read_text()
    mixed = invoke("diff", plain[0], zst[1], "--format", "json")  # one of each kind
    assert mixed.exit_code == 1 and mixed.report["first_divergence"]["op"] == "aten::cos"
    shown = invoke("show", zst[1])
    assert shown.exit_code == 0 and shown.stdout == invoke("show", plain[1]).stdout.replace(plain[1], zst[1])
    assert invoke("nan", zst[0]).exit_code == invoke("nan", plain[0]).exit_code == 0


def test_repro_of_a_compressed_run_directory(demo_runs: dict[str, Result], tmp_path: Path) -> None:
    made = invoke("repro", demo_runs["compressed"].report["run_dir"], "--out-dir", str(tmp_path), "--no-check",
                  "--format", "json")
    assert made.exit_code == 1, made.stderr
    assert "torch.ops.aten.cos.default" in Path(made.report["script"]).read_text()


def test_record_to_a_zst_name(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl.zst"
    result = invoke("record", str(FIXTURES / "no_compile.py"), "-o", str(trace))
    assert result.exit_code == 0, result.stderr
    assert trace.read_bytes()[:4] == ZSTD_MAGIC and (tmp_path / "t.log").is_file()
    footer = read_footer(trace)
    assert footer is not None and footer["complete"] and footer["ops"] > 0


@pytest.mark.parametrize(("fixture", "children"), [("dataloader_workers.py", 2), ("os_fork.py", 1)])
def test_forked_children_leave_a_compressed_trace_intact(tmp_path: Path, fixture: str, children: int) -> None:
    """DataLoader workers (num_workers=2, forked mid-recording, leaving with os._exit) and an os.fork() child
    that exits normally: the parent's .jsonl.zst holds its own records, in order, and a footer."""
    trace = tmp_path / "t.jsonl.zst"
    result = invoke("record", str(FIXTURES / fixture), "--backend", "eager", "-o", str(trace), "--timeout", "300")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in _decompressed_lines(trace)]
    kinds = [line["t"] for line in lines]
    assert kinds[0] == "header" and kinds[-1] == "footer" and kinds.count("header") == kinds.count("footer") == 1
    indices = [line["i"] for line in lines[1:-1]]
    assert indices == list(range(len(indices))) and indices
    assert lines[-1]["child_processes"] == children
    assert read_footer(trace) == lines[-1]


def _decompressed_lines(trace: Path) -> list[str]:
    """The decompressed lines, by zstandard directly (not the reader under test)."""
    import zstandard

    data = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(trace.read_bytes())
    return data.decode().splitlines()


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd binary")
def test_zstdcat_reads_a_recorded_trace(demo_runs: dict[str, Result]) -> None:
    zst = demo_runs["compressed"].report["traces"][0]
    decoded = subprocess.run(["zstd", "-dc", zst], capture_output=True, check=True, text=True).stdout.splitlines()
    assert [json.loads(line) for line in decoded] == _lines(Path(zst))


def test_per_rank_compressed_traces_are_found_by_their_set_name(tmp_path: Path) -> None:
    for rank in (0, 1):
        writer = TraceWriter(tmp_path / f"t.rank{rank}.jsonl.zst", {"rank": rank, "world_size": 2})
        writer.close()
    assert rank_set(tmp_path / "t.jsonl.zst") == [tmp_path / "t.rank0.jsonl.zst", tmp_path / "t.rank1.jsonl.zst"]
    assert rank_set(tmp_path) == [tmp_path / "t.rank0.jsonl.zst", tmp_path / "t.rank1.jsonl.zst"]


def test_bisect_with_compress_names_its_traces_jsonl_zst(tmp_path: Path) -> None:
    result = invoke("bisect", str(FIXTURES / "no_compile.py"), "--backend", "aot_eager", "--out-dir", str(tmp_path),
                    "--format", "json", "--compress")
    assert result.exit_code == 0, result.stderr  # nothing to bisect
    assert [Path(t).name for t in result.report["traces"]] == ["a-eager.jsonl.zst", "b-aot_eager.jsonl.zst"]


def test_assert_match_keeps_compressed_traces_when_asked(tmp_path: Path) -> None:
    import torch

    def wrong(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        for node in gm.graph.nodes:
            if node.target is torch.cos:
                node.target = torch.sin
        gm.recompile()
        return gm.forward

    with pytest.raises(AssertionError, match="traces kept"):
        tracediff.assert_match(lambda x: torch.cos(x) * 2, (torch.randn(8),), backend=wrong,
                               config=Config(compress=True), trace_dir=tmp_path)
    assert (tmp_path / "a-eager.jsonl.zst").read_bytes()[:4] == ZSTD_MAGIC


def test_a_recording_killed_by_a_signal_leaves_a_readable_compressed_trace(tmp_path: Path) -> None:
    """SIGKILL: no footer, no frame end, the writer thread's queue lost; what the writer thread had written
    (a block ended every 256 records) reads back, in order, and the trace is reported truncated."""
    trace = tmp_path / "t.jsonl.zst"
    child = subprocess.Popen(child_command(trace, FIXTURES / "trains_until_stopped.py", "eager"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert child.stdout is not None
        for line in child.stdout:  # blocks until the script says it is training
            if "training, pid" in line:
                break
        deadline = time.monotonic() + 120
        while _records_written(trace) < 600 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
    read = Trace(trace)
    records = list(read)
    assert read.truncated and read.footer is None and read_footer(trace) is None
    assert len(records) >= 512 and [r["i"] for r in records] == list(range(len(records)))


def _records_written(trace: Path) -> int:
    try:
        return sum(1 for _ in Trace(trace))
    except TraceFormatError:  # not even the header written yet
        return 0
