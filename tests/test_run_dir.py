"""outputs.RunDir: the one place that names the files of a run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.errors import UserError
from tracediff.outputs import RunDir, log_path


def test_each_file_of_a_run_directory_has_one_name(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    names = {
        run.trace("a", "eager"): "a-eager.jsonl",
        run.trace("b", "mod:my backend"): "b-mod_my_backend.jsonl",
        run.trace("b", None): "b-as-written.jsonl",
        run.calls_trace("b", "inductor"): "b-inductor.calls.jsonl",
        run.unfused_trace("inductor"): "c-inductor-unfused.jsonl",
        run.float64_trace("eager"): "n-eager-float64.jsonl",
        run.bisect_trace(7): "bisect-007.jsonl",
        run.fix_trace(3): "fix-03.jsonl",
        run.fix_trace(3, eager=True): "fix-03-eager.jsonl",
        run.report_json: "report.json",
        run.fix_text: "fix.txt",
    }
    assert {path.name: name for path, name in names.items()} == {name: name for name in names.values()}
    assert all(path.parent == tmp_path for path in names)
    assert [p.name for p in run.timing("as compiled")] == ["timing-as compiled.json", "timing-as compiled.jsonl"]


def test_a_compressed_run_directory_names_every_trace_jsonl_zst_and_nothing_else(tmp_path: Path) -> None:
    plain, compressed = RunDir(tmp_path), RunDir(tmp_path, compress=True)
    traces = [lambda run: run.trace("a", "eager"), lambda run: run.calls_trace("b", "inductor"),
              lambda run: run.unfused_trace("inductor"), lambda run: run.float64_trace("eager"),
              lambda run: run.bisect_trace(7), lambda run: run.fix_trace(3, eager=True)]
    for name in traces:
        assert name(compressed).name == name(plain).name + ".zst"
    assert compressed.report_json == plain.report_json and compressed.timing("x") == plain.timing("x")
    assert RunDir.create(tmp_path / "made", compress=True).compress


def test_a_trace_log_is_named_without_its_trace_suffixes() -> None:
    assert [log_path(Path(f"run/a-eager{suffix}")) for suffix in (".jsonl", ".jsonl.gz", ".jsonl.zst")] == \
        [Path("run/a-eager.log")] * 3
    assert log_path(Path("run/a-eager.calls.jsonl.zst")) == Path("run/a-eager.calls.log")
    assert log_path(Path("trace")) == Path("trace.log")


def test_a_new_run_directory_is_made_unique_under_dot_tracediff(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = RunDir.create(None), RunDir.create(None)
    assert first.path != second.path and first.path.parent == second.path.parent == Path(".tracediff")
    assert first.path.is_dir() and second.path.is_dir()


def test_an_out_dir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="--out-dir .*exists and is not a directory"):
        RunDir.create(tmp_path / "file")
