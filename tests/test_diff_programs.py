"""Diffs of traces that do not come from one program, and what the report says about the runs' setup."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import FIXTURES, invoke
from tests.synth import TraceBuilder
from tracediff.config import Config
from tracediff.diff.decide import decide
from tracediff.diff.engine import _path, diff_traces, header_differences, program_differences
from tracediff.report.text import render_text

X = torch.linspace(-1, 1, 24)


@pytest.fixture(scope="module")
def unrelated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different scripts (same ops on inputs of other shapes), recorded eager."""
    out = tmp_path_factory.mktemp("unrelated")
    paths = []
    for script in ("tanh_sum.py", "tanh_sum_wide.py"):
        path = out / script.replace(".py", ".jsonl")
        recorded = invoke("record", str(FIXTURES / script), "--backend", "eager", "-o", str(path))
        assert recorded.exit_code == 0, recorded.stderr
        paths.append(path)
    return paths[0], paths[1]


def test_diff_of_two_scripts_says_so_and_claims_no_agreement(unrelated: tuple[Path, Path]) -> None:
    a, b = unrelated
    result = invoke("diff", str(a), str(b), "--format", "json")
    report = result.report
    assert report["program_differences"] == [
        f"different scripts: A ran {FIXTURES / 'tanh_sum.py'}, B ran {FIXTURES / 'tanh_sum_wide.py'}"]
    assert any("different programs" in note for note in report["notes"])
    first = report["first_divergence"]
    assert first is not None and "inputs agree" not in first["note"]
    text = invoke("diff", str(a), str(b)).stdout
    assert "inputs agree" not in text and "note: the traces come from different programs" in text


def test_program_differences() -> None:
    assert program_differences({"command": ["t.py", "--n", "2"]}, {"command": ["/elsewhere/t.py", "--n", "2"]}) == []
    assert program_differences({"command": ["t.py", "--n", "2"]}, {"command": ["t.py"]}) == [
        "the script's arguments differ: A --n 2, B (none)"]
    assert program_differences({"command": ["t.py"]}, {"command": ["u.py"]}) == ["different scripts: A ran t.py, B ran u.py"]
    assert program_differences({}, {"command": ["u.py"]}) == []  # an old header without a command: nothing to say


def test_same_op_on_inputs_of_other_shapes_is_not_inputs_agree(tmp_path: Path) -> None:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl")
    xa, xb = X.reshape(4, 6), (X * 2).reshape(6, 4)
    a.op("aten::sum", [a.tensor("x", xa)], [a.tensor("s", xa.abs().sum(), "0")])
    b.op("aten::sum", [b.tensor("x", xb)], [b.tensor("s", xb.abs().sum(), "0")])
    config = Config()
    report = decide(diff_traces(a.close(), b.close(), config), ["a", "b"], config).to_json()
    first = report["first_divergence"]
    assert first is None or (first["inputs_agree"] is False and "inputs agree" not in first["note"])


@pytest.mark.parametrize("path, shown", [("root['command'][0]", "command[0]"),
                                         ("root['settings']['inductor']['fallback_random']",
                                          "settings.inductor.fallback_random"),
                                         ("root['env'][\"it's\"]", "env.it's"), ("root['torch']", "torch")])
def test_header_paths(path: str, shown: str) -> None:
    assert _path(path) == shown


def test_header_difference_of_a_list_item_keeps_its_brackets() -> None:
    lines = header_differences({"command": ["a.py"], "torch": "2.12"}, {"command": ["b.py"], "torch": "2.13"})
    assert lines == ["command[0]: 'a.py' -> 'b.py'", "torch: '2.12' -> '2.13'"]


def test_dropped_compile_options_are_noted(tmp_path: Path) -> None:
    """The script asked for torch.compile(mode=..., options=...); aot_eager rejects them, so the run dropped them."""
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "aot_eager")
    for builder in (a, b):
        builder.op("aten::cos", [builder.tensor("x", X)], [builder.tensor("y", X.cos(), "0")])
    a.close()
    b.writer.close({"ops": 1, "compile_calls": 1, "error": None, "dropped_compile_options": ["mode", "options", "mode"]})
    config = Config()
    report = decide(diff_traces(a.path, b.path, config), ["a", "b"], config).to_json()
    assert report["runs"][1]["dropped_compile_options"] == ["mode", "options"]
    assert report["runs"][0]["dropped_compile_options"] == []
    notes = [n for n in report["notes"] if "dropped" in n]
    assert len(notes) == 1 and "run B (aot_eager)" in notes[0] and "mode=, options=" in notes[0]
    assert f"note: {notes[0]}" in render_text(report)


def test_an_eager_and_an_inductor_recording_differ_in_their_headers_by_the_backend_alone(tmp_path: Path) -> None:
    """H200 and CPU: after the eager recording stopped importing inductor's config, every report said
    `settings.env.TORCHINDUCTOR_CACHE_DIR: only in B`: importing inductor sets it. The header records the
    environment the run was given."""
    import os
    import subprocess

    from tests.conftest import child_command
    from tracediff.trace.reader import Trace

    script = tmp_path / "s.py"
    script.write_text("print('no compile')\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    headers = []
    for slot, backend in (("a", "eager"), ("b", "inductor")):
        trace = tmp_path / f"{slot}.jsonl"
        subprocess.run(child_command(trace, script, backend), env=env, check=True, capture_output=True, timeout=300)
        headers.append(Trace(trace).header)
    assert header_differences(*headers) == ["backend: 'eager' -> 'inductor'"]
