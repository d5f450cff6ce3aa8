"""`tracediff run --light`: long runs recorded as compiled calls only, judged within a time budget, and recorded in
depth only around the first wrong call (record/scope.py, record/judging/policy.py, run/light.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import FIXTURES, Result, invoke, marker_line
from tests.test_same_inputs import Sink, cos_as_sin
from tracediff.errors import UserError
from tracediff.record.backends import resolve_backend
from tracediff.record.judging.backend import JudgingBackend, inner_backend
from tracediff.record.judging.policy import InWindow, JudgePolicy, TimeBudget
from tracediff.record.scope import CallWindow, RecordScope, WindowState
from tracediff.record.session import RecordingSession
from tracediff.report.drift import _check_errors, drift_section, read_drift
from tracediff.trace.reader import Trace


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# -- scope and policy ----------------------------------------------------------------------------------------

def test_a_call_window_reads_back_what_it_writes() -> None:
    window = CallWindow("GPT2LMHeadModel.forward", 150)
    assert CallWindow.parse(str(window)) == window
    assert CallWindow.parse("a@b.forward@3") == CallWindow("a@b.forward", 3)
    for bad in ("Net.forward", "Net.forward@", "@3", "Net.forward@x"):
        with pytest.raises(UserError, match="REGION@CALL"):
            CallWindow.parse(bad)


def test_a_window_opens_at_its_call_and_closes_at_the_next_call_of_its_region() -> None:
    state = WindowState(RecordScope("window", CallWindow("Net.forward", 2)))
    seen = []
    for region, call in [("Net.forward", 0), ("step", 0), ("Net.forward", 1), ("Net.forward", 2), ("step", 2),
                         ("Net.forward", 3), ("Net.forward", 2)]:
        state.at_region_call(region, call)
        seen.append(state.open)
    assert seen == [False, False, False, True, True, False, False]
    assert WindowState(RecordScope()).open and WindowState(RecordScope("calls")).open


def test_the_time_budget_judges_each_graphs_first_call_and_then_what_the_budget_allows() -> None:
    budget = TimeBudget(ratio=0.5)
    budget.spend(1e6)  # far over any budget
    assert budget.admits("g0", 0, None)  # a graph's first call: always (a late recompile is judged at once)
    assert not budget.admits("g0", 1, None)
    assert budget.admits("g1", 0, None)
    assert budget.summary() | {"spent_s": 0} == {"policy": "time budget", "calls": 3, "judged": 2, "spent_s": 0}
    fresh = TimeBudget(ratio=0.5)
    assert fresh.admits("g0", 7, None)  # nothing spent yet


def test_the_window_policy_judges_only_calls_inside_the_window() -> None:
    policy = InWindow(CallWindow("Net.forward", 4))
    assert [policy.admits("g", c, ("Net.forward", c)) for c in range(6)] == [False] * 4 + [True, False]
    assert not policy.admits("g", 0, None)
    assert JudgePolicy().admits("g", 5, None)


def test_a_judged_graph_under_a_spent_budget_judges_its_first_call_only() -> None:
    sink, budget = Sink(), TimeBudget()
    budget.spend(1e6)
    f = torch.compile(lambda x: torch.cos(x) + 1, backend=JudgingBackend(inner_backend(cos_as_sin, {}), sink, "f",
                                                                       policy=budget))
    x = torch.randn(16)
    results = [f(x) for _ in range(4)]
    assert all(torch.equal(r, torch.sin(x) + 1) for r in results)  # the compiled code ran every time
    assert len(sink.checks) == 1 and sink.wrong()  # judged (and found wrong) on the first call alone
    assert budget.summary()["calls"] == 4 and budget.summary()["judged"] == 1


# -- what a scoped recording keeps --------------------------------------------------------------------------

def _train(steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = compiled(torch.randn(3, 4)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _records(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    trace = Trace(path)
    records = list(trace)
    assert trace.footer is not None
    return records, trace.footer


def test_a_calls_only_recording_keeps_the_regions_and_no_op(tmp_path: Path) -> None:
    with RecordingSession(tmp_path / "t.jsonl", backend=resolve_backend("eager"), scope=RecordScope("calls")) as s:
        _train(3)
        assert torch.utils._python_dispatch._len_torch_dispatch_stack() == 0  # no dispatch mode: no op pays
    records, footer = _records(tmp_path / "t.jsonl")
    assert footer["ops"] == 0 and {r["t"] for r in records} == {"region"}
    exits = [r for r in records if r["ev"] == "exit"]
    assert [r["call"] for r in exits] == [0, 1, 2] and all(r["out"][0]["fp"] for r in exits)
    assert s.kernels is None


def test_a_window_recording_keeps_the_ops_of_one_call_to_the_next(tmp_path: Path) -> None:
    window = CallWindow("Sequential.forward", 1)
    with RecordingSession(tmp_path / "t.jsonl", backend=resolve_backend("eager"), scope=RecordScope("window", window)):
        _train(4)
    records, footer = _records(tmp_path / "t.jsonl")
    regions = [(r["ev"], r["call"]) for r in records if r["t"] == "region"]
    assert regions == [("enter", 1), ("exit", 1)]  # call 2's start closed the window
    ops = [r["op"] for r in records if r["t"] == "op"]
    assert records[0]["t"] == "region" and "aten::addmm" in ops  # the forward,
    assert "aten::tanh_backward" in ops and any(op.startswith("aten::add_") for op in ops)  # backward and SGD's step
    assert footer["ops"] == len(ops) and [r["i"] for r in records] == list(range(len(records)))


# -- the command ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "message"), [
    (("--repeat", "2"), "compares two backends once"),
    (("--no-same-inputs",), "does not combine with --no-same-inputs"),
    (("--calibrate",), "does not combine with --calibrate"),
])
def test_light_says_what_it_does_not_combine_with(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    result = invoke("run", str(FIXTURES / "clean_mlp.py"), "--light", "--out-dir", str(tmp_path), *extra)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_a_drift_plot_draws_both_runs_and_each_calls_own_error() -> None:
    drift = {"region": "Net.forward", "measure": "value", "a": [(i, 1.0 / (i + 1)) for i in range(6)],
             "b": [(i, 1.0 / (i + 1) + 1e-3 * i) for i in range(6)], "wrong_at": 4, "backends": ["eager", "inductor"],
             "checks": [{"step": i, "c": 1e-7 if i < 4 else 1e-2, "e": 1e-7} for i in range(6)]}
    page = drift_section(drift)
    assert 'id="drift-plot"' in page and 'id="local-error-plot"' in page and 'class="wrong-call"' in page
    assert page.count('class="series"') == 5  # two runs; compiled, eager and the runs apart
    assert "Drift over 6 steps" in page and "first wrong call (call 4)" in page


def test_a_match_says_which_calls_it_does_not_cover() -> None:
    from tracediff.diff.same_inputs import SameInputFindings

    sampled = SameInputFindings(calls=40, backward_calls=40, graphs=1, wrong_calls=0, first_wrong=None,
                                policy="time budget", calls_made=300)
    assert "260 of the 300 compiled calls were not judged (time budget)" in str(sampled.skipped_note())
    assert "(judged of 300 made" in sampled.summary()
    every = SameInputFindings(calls=300, backward_calls=300, graphs=1, wrong_calls=0, first_wrong=None,
                              calls_made=300)
    assert every.skipped_note() is None and "made" not in every.summary()
    # Calls whose references failed (a torch.func graph) are unjudged, not left out by a policy: said once, by
    # unjudged_note, not blamed on the light mode (before: "3 of the 3 ... `tracediff run` without --light").
    failed = SameInputFindings(calls=0, backward_calls=0, graphs=0, wrong_calls=0, first_wrong=None, unjudged=3,
                               unjudged_reason="its uncompiled graph raised RuntimeError", calls_made=3,
                               unjudged_forward=3)
    assert failed.skipped_note() is None and "made" not in failed.summary() and failed.unjudged_note()
    partly = SameInputFindings(calls=40, backward_calls=0, graphs=1, wrong_calls=0, first_wrong=None, unjudged=10,
                               policy="time budget", calls_made=300, unjudged_forward=10)
    assert "250 of the 300 compiled calls were not judged (time budget)" in str(partly.skipped_note())


def test_the_error_per_step_is_the_compiled_codes_worst_output_with_eagers_beside_it() -> None:
    def out(err_c: float, err_e: float, size: float = 1.0) -> dict[str, Any]:
        return {"err_c": err_c, "err_e": err_e, "size": size}

    checks = [{"rc": ["Net.forward", 0], "ph": "fw", "outs": [out(1e-7, 2e-7), out(4e-6, 1e-6, 2.0)]},
              {"rc": ["Net.forward", 0], "ph": "bw", "outs": [out(1e-6, 1e-6)]},
              {"rc": ["Net.forward", 1], "ph": "fw", "outs": [], "unjudged": "a subclass"},
              {"rc": ["Net.forward", 2], "ph": "fw", "outs": [out(3e-3, 1e-7)]}]
    assert _check_errors(checks) == [{"step": 0, "c": 2e-6, "e": 5e-7}, {"step": 2, "c": 3e-3, "e": 1e-7}]


@pytest.mark.slow
def test_a_late_fault_is_named_from_the_light_run_and_recorded_in_depth_around_it(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    result: Result = invoke("run", str(FIXTURES / "late_recompile_fault.py"), "--backends", "eager,inductor", "--light",
                            "--out-dir", str(tmp_path), "--format", "json", "--html", str(html))
    report = result.report
    first = report["first_divergence"]
    assert report["verdict"] == "diverged" and first["pinned_by"] == "same_inputs", report["notes"]
    assert first["op"] == "aten::cos"
    assert first["source"] == f"late_recompile_fault.py:{marker_line('late_recompile_fault.py', 'divergent line')}"
    assert report["same_inputs"]["first_wrong"]["region_call"] == {"name": "Net.forward", "call": 4}
    light = report["light"]
    assert light["window"] == "Net.forward@4" and light["calls_made"] == 5 and light["policy"] == "time budget"
    # The light traces hold the compiled calls alone; the depth traces every op of step 4 and nothing before it.
    for path in light["traces"]:
        records, footer = _records(Path(path))
        assert footer["ops"] == 0 and len([r for r in records if r["t"] == "region" and r["ev"] == "exit"]) == 5
    assert [Path(t).name for t in report["traces"]] == ["a-eager.jsonl", "b-inductor.jsonl"]
    records, _ = _records(Path(report["traces"][0]))
    assert {r["call"] for r in records if r["t"] == "region"} == {4} and any(r["t"] == "op" for r in records)
    assert first["index"] is not None and records[first["index"]]["op"] == "aten::cos"
    page = html.read_text()
    assert 'id="drift-plot"' in page and 'class="wrong-call"' in page
    assert any("recorded in depth" in note for note in report["notes"])


@pytest.mark.slow
def test_a_healthy_training_run_matches_in_the_light_mode_and_says_how_many_calls_were_judged(tmp_path: Path) -> None:
    result = invoke("run", str(FIXTURES / "clean" / "tiny_gpt_train.py"), "--backends", "eager,aot_eager", "--light",
                    "--out-dir", str(tmp_path), "--format", "json", "--", "--steps", "12")
    report = result.report
    assert report["verdict"] == "match" and result.exit_code == 0, report["notes"]
    judged = report["same_inputs"]
    assert judged["policy"] == "time budget" and judged["calls_made"] == 12 and 1 <= judged["calls"] <= 12
    assert judged["backward_calls"] >= 1 and judged["wrong_calls"] == 0
    assert report["light"]["window"] is None and report["traces"] == report["light"]["traces"]
    assert not (tmp_path / "a-eager.jsonl").exists()  # nothing was wrong: no depth recording
    drift = read_drift(report)
    assert drift is not None and len(drift["a"]) == len(drift["b"]) == 12
    # Both ran to their end, printing the same losses (aot_eager computes as eager does).
    printed = [re.findall(r"step \d+: loss \S+", Path(run["log"]).read_text()) for run in report["runs"]]
    assert len(printed[0]) == 12 and printed[0] == printed[1]
