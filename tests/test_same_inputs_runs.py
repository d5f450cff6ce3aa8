"""`tracediff run` judges each compiled call on its own inputs: faults named with their call, op and line;
healthy training runs (fixtures/clean/, tests/clean_scripts.py) match.

Each fixture is a user's script with a fault planted in the compiler (an inductor pass): in a compiled
backward, in a compiled optimizer step, in a graph compiled late (a new batch size at step 4).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import Result, marker_line

pytestmark = pytest.mark.slow


def _named(report: dict, fixture: str) -> dict:
    first = report["first_divergence"]
    assert report["verdict"] == "diverged" and report["exit_code"] == 1, report.get("notes")
    assert first["pinned_by"] == "same_inputs", first
    assert first["source"] == f"{fixture}:{marker_line(fixture, 'divergent line')}", first
    return first


def test_a_fault_in_a_compiled_backward_is_named_at_its_forward_line(run_fixture: Callable[..., Result]) -> None:
    report = run_fixture("backward_fault.py", "eager,inductor").report
    first = _named(report, "backward_fault.py")
    assert first["op"] == "aten::tanh"
    wrong = report["same_inputs"]["first_wrong"]
    assert wrong["phase"] == "compiled backward"
    assert {o["name"] for o in wrong["outputs"]} == {"grad of fc1.weight", "grad of fc1.bias"}


def test_a_fault_in_a_compiled_optimizer_step_is_named_at_the_step(run_fixture: Callable[..., Result]) -> None:
    report = run_fixture("optimizer_fault.py", "eager,inductor").report
    first = _named(report, "optimizer_fault.py")
    assert first["op"] == "aten::sqrt"
    wrong = report["same_inputs"]["first_wrong"]
    assert wrong["call"] == 0 and all("(written in place)" in o["name"] for o in wrong["outputs"])
    assert report["same_inputs"]["wrong_calls"] == 3  # every step


def test_a_fault_from_a_late_recompile_is_named_with_its_step(run_fixture: Callable[..., Result]) -> None:
    report = run_fixture("late_recompile_fault.py", "eager,inductor").report
    first = _named(report, "late_recompile_fault.py")
    assert first["op"] == "aten::cos"
    wrong = report["same_inputs"]["first_wrong"]
    assert wrong["region_call"] == {"name": "Net.forward", "call": 4}  # step 4: the batch of 6
    assert wrong["graph"].endswith("graph 1") and wrong["phase"] == "forward"
    assert report["same_inputs"]["calls"] == 5


def test_trace_rules_alone_still_answer_with_no_same_inputs(run_fixture: Callable[..., Result]) -> None:
    # --no-narrow: the verdict is the point here, not the re-runs (tests/test_narrow.py) that pin it in a kernel
    report = run_fixture("optimizer_fault.py", "eager,inductor", "--no-same-inputs", "--no-narrow").report
    assert "same_inputs" not in report
    assert report["verdict"] == "diverged"  # the traces differ after the first step


@pytest.mark.parametrize(("fixture", "marker"), [
    ("perturbed_fusion.py", "divergent line"),  # cos scaled inside a fused kernel
    ("perturbed_layernorm.py", "divergent line"),  # a node of the decomposed layer norm
    ("wrong_only_when_fused.py", "fused line"),  # wrong only while inductor may fuse
    ("view_index_put.py", "divergent line"),  # a write through a view of the returned tensor
    ("inductor_wrong_decomposition.py", "divergent line"),  # cos decomposed as sin
    ("fault_rotary_sin.py", "divergent line"),  # a rotary embedding's sin, its freqs recomputed in each kernel
])
def test_a_planted_fault_is_named_at_its_line_on_its_own_inputs(run_fixture: Callable[..., Result], fixture: str,
                                                                 marker: str) -> None:
    report = run_fixture(fixture, "eager,inductor").report
    first = report["first_divergence"]
    assert report["verdict"] == "diverged" and first["pinned_by"] == "same_inputs", first
    assert first["source"] == f"{fixture}:{marker_line(fixture, marker)}", first


def test_a_fault_that_follows_the_graphs_last_op_is_not_pinned_on_a_prefix(run_fixture: Callable[..., Result]) -> None:
    """fault_last_op scales whatever op ends a compiled graph: each prefix's last op turns wrong, so the search
    ends at the first one; inside the whole graph that op is right, so it is not pinned there, and in the region's
    first call the traces' finding names the place (before: the convolution two lines above, pinned)."""
    report = run_fixture("last_op_fault.py", "eager,inductor").report
    first = report["first_divergence"]
    assert report["verdict"] == "diverged" and first["pinned_by"] != "same_inputs"
    assert first["source"] == f"last_op_fault.py:{marker_line('last_op_fault.py', 'divergent line')}", first
    assert report["same_inputs"]["first_wrong"]["culprit"]["unconfirmed"] is True


def test_a_legitimate_reordering_the_trace_rules_call_a_divergence_matches(run_fixture: Callable[..., Result]) -> None:
    """offset_layernorm: every layer norm cancels catastrophically in float32, and inductor's reordered reduction
    is 6e-4 off eager's; the trace rules need --calibrate to pass it, the same-input judge does not."""
    report = run_fixture("offset_layernorm.py", "eager,inductor").report
    assert report["verdict"] == "match" and report["same_inputs"]["wrong_calls"] == 0, report["first_divergence"]
