"""The typed outcome writes exactly the report's JSON contract and reads it back."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tests.synth import TraceBuilder
from tests.test_verdict import _chain
from tracediff.config import Config
from tracediff.diff.decide import decide, unreadable
from tracediff.diff.determinism import with_advice
from tracediff.diff.engine import diff_traces
from tracediff.outcome import Cause, Outcome, RunResult, Verdict
from tracediff.report.text import render_text

# The keys docs/design.md §6 fixes, in the order reports have always had them.
CONTRACT = ["verdict", "exit_code", "traces", "first_divergence", "inherited", "inherited_complete", "compared",
            "paired", "unpaired", "structure", "nan_origin", "compiled", "runs", "header_differences",
            "program_differences", "tolerances", "exact", "notes"]
DIVERGENCE = ["kind", "op", "index", "source", "module", "rel_diff", "candidates", "pinned_by", "code", "path",
              "inputs_agree", "may_start_earlier", "note", "observed", "b", "tensor", "rule"]


def _outcome(tmp_path: Path, wrong_cos: bool) -> Outcome:
    a, b = TraceBuilder(tmp_path / "a.jsonl"), TraceBuilder(tmp_path / "b.jsonl", "aot_eager")
    _chain(a)
    _chain(b, wrong_cos=wrong_cos)
    paths = [a.close(), b.close()]
    return decide(diff_traces(*paths, Config()), [str(p) for p in paths], Config())


def _round_trip(outcome: Outcome) -> dict:
    written = json.loads(json.dumps(outcome.to_json()))
    again = Outcome.from_json(written)
    assert json.dumps(again.to_json()) == json.dumps(written)  # same keys, same order, same values
    return written


def test_a_divergence_writes_the_contract_and_reads_back(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path, wrong_cos=True)
    assert outcome.verdict is Verdict.DIVERGED and outcome.exit_code == 1
    assert outcome.first_divergence is not None and outcome.first_divergence.cause is Cause.OUTPUT
    written = _round_trip(outcome)
    assert list(written) == CONTRACT
    assert list(written["first_divergence"]) == DIVERGENCE
    assert written["first_divergence"]["op"] == "aten::cos" and written["first_divergence"]["tensor"]["rel_diff"] > 0
    assert written["first_divergence"]["rule"] == "inputs_agree_outputs_differ"
    assert "rule   inputs_agree_outputs_differ" in render_text(written)  # the text report names it too


def test_a_match_and_the_sections_later_stages_add_read_back(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path, wrong_cos=False)
    assert outcome.verdict is Verdict.MATCH and outcome.first_divergence is None
    later = replace(with_advice(outcome, "eager", 0), run_dir=str(tmp_path), script="s.py", bisected=True,
                    bisect=None, bisect_steps=({"call": 1, "good": True},), oracle_calls=1)
    written = _round_trip(later)
    assert list(written) == [*CONTRACT, "determinism", "run_dir", "script", "bisect", "bisect_steps", "oracle_calls"]
    assert written["determinism"] == {"backend": "eager", "cause": None, "advice": []}


def test_a_run_that_left_no_readable_trace(tmp_path: Path) -> None:
    run = RunResult("inductor", tmp_path / "b.jsonl", tmp_path / "b.log", 3, False, 1.0)
    written = _round_trip(unreadable(["a.jsonl", "b.jsonl"], [run], "run B left no readable trace"))
    assert list(written) == ["verdict", "exit_code", "traces", "first_divergence", "runs", "notes"]
    assert written["verdict"] == "failed" and written["exit_code"] == 3
    assert list(written["runs"][0]) == ["backend", "failure", "returncode", "timed_out", "log", "output_tail"]


def test_the_cause_is_decided_from_the_verdict_not_from_its_note() -> None:
    """Uninitialized memory among the ops named, or an input no op of A made (a program input): causes of
    their own for the determinism advice, written as `kind` "output" as before."""
    from tracediff.diff.decide import divergence
    from tracediff.diff.place import Place
    from tracediff.diff.verdict import Divergence as Found

    add, empty = Place(7, "aten::add.Tensor", "m.py:8", "Net"), Place(5, "aten::empty_like", "m.py:5", "Net")
    garbage = divergence(Found("output", add, None, (empty, add), None, False, "any words", rule="walked_back"))
    assert garbage.cause is Cause.UNINITIALIZED_MEMORY and garbage.to_json()["kind"] == "output"
    given = divergence(Found("output", add, None, (add,), None, False, "any words", program_input=True,
                                   rule="program_input"))
    assert given.cause is Cause.PROGRAM_INPUT and given.to_json()["kind"] == "output"
    assert divergence(Found("nan", add, None, (add,), None, True, "", rule="inputs_agree_outputs_differ")).cause is Cause.NAN
